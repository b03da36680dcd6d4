"""MindRL at a bench shape, as a user runs it: the shape's recipe overrides, cli/train_grpo.py
in a process of its own (a fresh run dir), and the rows of its metrics.jsonl as step rows
(bench_e2e's columns; bench_async reads more keys from the same rows)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

from bench.common.flops import kv_cache_bytes
from bench.common.shapes import SHARED, Shape, paths
from mindrl.config.compose import SMOKE_RECIPE

ROOT = Path(__file__).resolve().parents[2]

# The recipe mindrl_overrides change (a+b=, the smoke recipe), named rather than left to the
# CLI's default.
RECIPE = SMOKE_RECIPE


def mindrl_overrides(shape: Shape, work: Path) -> List[str]:
    p, s = paths(work, shape), SHARED
    seq = shape.seq_length
    return [
        f"model={shape.model}", f"run_dir={p['mindrl_run']}",
        f"prepare.tiny_model={shape.model}", f"prepare.num_prompts={s['num_prompts']}",
        f"prepare.max_operand={s['max_operand']}", "prepare.holdout_pairs=0",
        f"megatron_training.tokenizer_name_or_path={p['hf']}",
        f"megatron_training.load={p['mcore']}", f"megatron_training.data_path={p['data']}",
        f"megatron_training.global_batch_size={shape.prompts}",
        f"megatron_training.train_iters={shape.steps}", f"megatron_training.seq_length={seq}",
        f"megatron_training.micro_batch_size={shape.micro_batch}",
        "++megatron_training.pack_sequences=true",   # the default; said, not assumed
        f"megatron_training.max_tokens_per_micro_batch={shape.token_budget}",
        f"megatron_training.lr={shape.lr}", f"megatron_training.seed={s['seed']}",
        f"megatron_training.adam_beta1={s['adam_beta1']}",
        f"megatron_training.adam_beta2={s['adam_beta2']}",
        f"+megatron_training.adam_eps={s['adam_eps']}",
        f"megatron_training.weight_decay={s['weight_decay']}",
        f"megatron_training.clip_grad={s['clip_grad']}",
        f"+megatron_training.cpu_threads={shape.threads}",
        f"megatron_training.bf16={str(shape.bf16).lower()}",
        # vLLM in the actor's dtype (on CPU only beside a bf16 actor: config/cpu_notice.py)
        f"generate_config.dtype={'bfloat16' if shape.bf16 else 'float32'}",
        f"rl_config.mini_batch_size={shape.prompts}",
        f"rl_config.n_samples_per_prompt={shape.n}",
        f"rl_config.kl_coef={s['kl_coef']}", f"rl_config.entropy_coeff={s['entropy_coeff']}",
        f"rl_config.clip_ratio={s['clip_ratio']}",
        f"rl_config.max_prompt_length={s['max_prompt_length']}",
        "rl_config.save_freq=1000000", "rl_config.val_data_path=null",
        "rl_config.dynamic_sampling=false",
        "rl_config.val_before_train=false", "rl_config.val_freq=null",
        f"generate_config.max_model_len={seq}",
        "generate_config.kv_cache_memory_bytes="
        f"{kv_cache_bytes(shape.model, shape.completions, shape.seq_length)}",
        f"+generate_config.cpu_threads={shape.threads}",
        f"generate_config.sampling_config.max_tokens={shape.max_tokens}",
        f"+generate_config.sampling_config.ignore_eos={str(shape.exact_length).lower()}",
        f"generate_config.sampling_config.temperature={s['temperature']}",
        f"generate_config.sampling_config.top_p={s['top_p']}",
        f"generate_config.sampling_config.seed={s['seed']}",
    ]


def drop_stale_model(shape: Shape, work: Path) -> None:
    """A checkpoint made before the model's max_position_embeddings was raised would cap
    vLLM's max_model_len: remove it (and its conversion) so that prepare makes it again,
    from the same seed, so the same weights."""
    from mindrl.config.model_spec import load_model_spec

    p = paths(work, shape)
    config = p["hf"] / "config.json"
    if not config.is_file():
        return
    want = load_model_spec(shape.model).max_position_embeddings
    if json.loads(config.read_text()).get("max_position_embeddings") != want:
        shutil.rmtree(p["hf"], ignore_errors=True)
        shutil.rmtree(p["mcore"], ignore_errors=True)


def run_mindrl(shape: Shape, work: Path, extra: Sequence[str] = ()) -> List[dict]:
    """cli/train_grpo.py as a user runs it (a fresh run dir, so no resume), with `extra`
    overrides after the shape's (--mindrl-overrides); its step rows."""
    return [mindrl_step(row, shape.completions) for row in mindrl_metrics(shape, work, extra)]


def mindrl_metrics(shape: Shape, work: Path, extra: Sequence[str] = ()) -> List[dict]:
    """cli/train_grpo.py with the shape's overrides and `extra` after them (a fresh run dir);
    the rows of its metrics.jsonl that time a step (bench/bench_async.py reads more keys)."""
    drop_stale_model(shape, work)
    run_dir = paths(work, shape)["mindrl_run"]
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "MINDRL_WORK_DIR": str(work), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, str(ROOT / "cli" / "train_grpo.py"), "--config-name", RECIPE,
           *mindrl_overrides(shape, work), *extra]
    proc = subprocess.run(cmd, env=env, cwd=str(work), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"MindRL run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return step_rows(run_dir / "metrics.jsonl")


def step_rows(metrics: Path) -> List[dict]:
    """The rows of a metrics.jsonl that time a step (validation rows do not)."""
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    return [row for row in rows if "timing_s/step" in row]


def mindrl_step(row: dict, completions: int) -> dict:
    """One metrics.jsonl row as a step row. Per-sample lengths are not logged: every sample
    counts as the step's mean prompt + mean response (bench/bench_e2e.py's docstring: the
    floor)."""
    t = {k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("timing_s/")}
    response, prompt = row["response_length/mean"], row["prompt_length/mean"]
    return {"step_s": t["step"], "gen_s": t["gen"], "reward_s": t["reward"],
            "logprob_s": t["old_log_prob"] + t["ref"],
            "update_s": t["update_actor"], "sync_s": t["reshard"],
            "completion_tokens": response * completions, "prompt_tokens": prompt * completions,
            "seq_lengths": [prompt + response] * completions,
            "completion_length": {"mean": response, "max": row["response_length/max"],
                                  "p50": row.get("response_length/p50"),
                                  "p90": row.get("response_length/p90")},
            "reward": row["critic/score/mean"]}
