#!/usr/bin/env python
"""`make demo` until the GRPO driver lands: run every real piece of the stack that exists on
the embedded tiny model and print what it measures. Nothing here is simulated; the step that
does not exist yet (rollouts through vLLM inside the Ray-driven GRPO loop) is named, not faked.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def megatron_log_probs(rank, world, spec, full_by_tp, batch):
    """Rank body: the actor at TP2 computes response log-probs of the batch."""
    from megatron.core import parallel_state as ps

    from mindrl.ckpt import mapping
    from mindrl.engines.megatron_engine import MegatronEngine
    from mindrl.models.builder import Parallelism, initialize_parallel

    parallel = Parallelism(tensor_model_parallel_size=world)
    initialize_parallel(parallel)
    engine = MegatronEngine(spec, parallel, micro_batch_size=4)
    engine.module.load_state_dict(mapping.stage_state_dict(
        full_by_tp[world], spec, ps.get_tensor_model_parallel_rank(), world, 0, 1), strict=False)
    return engine.compute_log_probs(batch)["log_probs"]


def main() -> int:
    import torch

    from mindrl.ckpt import mapping
    from mindrl.config import format_plan, load_recipe, local_cluster, make_plan, work_dir
    from mindrl.data.arith import arith_problems
    from mindrl.distributed import spawn_local
    from mindrl.models.spec import load_model_spec
    from mindrl.models.tiny import make_tiny_model
    from mindrl.rewards import RuleReward

    torch.set_num_threads(1)
    t0 = time.time()
    hf_dir = work_dir() / "models" / "tiny-qwen2-hf"
    if not (hf_dir / "config.json").exists():
        make_tiny_model("tiny-qwen2", "char", hf_dir)
    print(f"[1] tiny Qwen2 HF checkpoint (random init, char tokenizer): {hf_dir}")

    run = load_recipe("grpo_tiny_cpu")
    print("[2] plan of the embedded recipe grpo_tiny_cpu:\n")
    print(format_plan(make_plan(run, local_cluster())))

    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    problems = arith_problems(8, seed=0)
    prompts = [tok(p.prompt)["input_ids"] for p in problems]
    answers = [tok(p.label)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")]
               for p in problems]
    P, R = max(map(len, prompts)), max(map(len, answers))
    batch = {"prompt_ids": torch.tensor([[0] * (P - len(p)) + p for p in prompts]),
             "prompt_mask": torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts]),
             "response_ids": torch.tensor([a + [0] * (R - len(a)) for a in answers]),
             "response_mask": torch.tensor([[1] * len(a) + [0] * (R - len(a)) for a in answers])}
    spec = load_model_spec("tiny-qwen2")
    full_by_tp = {2: mapping.full_mcore_from_hf(hf.state_dict(), spec, 2)}
    megatron = spawn_local(megatron_log_probs, 2, spec, full_by_tp, batch)[0]
    with torch.no_grad():
        ref = []
        for p, a in zip(prompts, answers):
            seq = torch.tensor(p + a + [0] * (R - len(a)))
            lsm = torch.log_softmax(hf(seq[None]).logits[0], -1)
            ref.append(lsm[torch.arange(R) + len(p) - 1, seq[len(p):]])
        ref = torch.stack(ref)
    mask = batch["response_mask"].bool()
    diff = (megatron - ref).abs()[mask].max().item()
    print(f"[3] Megatron actor at TP2 (gloo, 2 ranks) vs transformers, response log-probs of "
          f"{len(problems)} arith answers: max |diff| = {diff:.2e}")

    completions = [p.label for p in problems[:4]] + ["x" + p.label for p in problems[4:]]
    with RuleReward(["arith"], [1.0], verifier_timeout=5, verifier_parallel=1) as reward:
        scores, metrics = reward.score(completions, [p.label for p in problems])
    print(f"[4] arith verifier through the timeout pool: scores {scores} "
          f"(expected four 1.0 then four 0.0), metrics {metrics}")
    print("[5] not in this build yet: vLLM rollouts, Megatron->vLLM resharding and the Ray GRPO "
          "driver (`cli/train_grpo.py` validates, plans and says so).")
    print(f"done in {time.time() - t0:.0f} s")
    ok = diff <= 1e-5 and scores == [1.0] * 4 + [0.0] * 4
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
