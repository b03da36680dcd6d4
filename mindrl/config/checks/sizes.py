"""Sizes and counts are at least 1. Runs first: a zero size would make every later
divisibility check misleading, so validate.find_problems stops here when any is below 1."""

from __future__ import annotations

from typing import Any

from mindrl.config import names
from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig


def check_positive(run: RunConfig) -> list[Problem]:
    """Sizes and counts below 1 make every later division meaningless."""
    mt, rl, gen = run.megatron_training, run.rl_config, run.generate_config
    items: list[tuple[str, Any]] = [
        ("megatron_training.global_batch_size", mt.global_batch_size),
        ("megatron_training.seq_length", mt.seq_length),
        ("megatron_training.train_iters", mt.train_iters),
        ("rl_config.mini_batch_size", rl.mini_batch_size),
        ("rl_config.n_samples_per_prompt", rl.n_samples_per_prompt),
        ("rl_config.epochs", rl.epochs),
        ("rl_config.max_prompt_length", rl.max_prompt_length),
        ("rl_config.verifier_parallel", rl.verifier_parallel),
        ("rl_config.val_n_samples", rl.val_n_samples),
        ("rl_config.max_gen_rounds", rl.max_gen_rounds),
        ("generate_config.infer_tensor_parallel_size", gen.infer_tensor_parallel_size),
        ("generate_config.infer_pipeline_parallel_size", gen.infer_pipeline_parallel_size),
        ("generate_config.infer_expert_parallel_size", gen.infer_expert_parallel_size),
        ("generate_config.max_num_seqs", gen.max_num_seqs),
        ("generate_config.max_num_batched_tokens", gen.max_num_batched_tokens),
        ("generate_config.max_model_len", gen.max_model_len),
        ("generate_config.sampling_config.max_tokens", gen.sampling_config.max_tokens),
        ("generate_config.cpu_threads", gen.cpu_threads),
    ]
    for opt in ("actor_forward_micro_batch_size", "ref_forward_micro_batch_size",
                "save_freq", "save_limit", "val_freq", "val_max_prompts"):
        if getattr(rl, opt) is not None:
            items.append((f"rl_config.{opt}", getattr(rl, opt)))
    for role in run.active_roles:
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                    "micro_batch_size", "cpu_threads", "log_interval"):
            items.append((names.role_key(run, role, key), getattr(run.role(role), key)))
    seen: set[str] = set()
    out = []
    for key, value in items:
        if key not in seen and value < 1:
            out.append(Problem(key, "must be at least 1", f"set {key} to a positive integer",
                               value))
        seen.add(key)
    return out

