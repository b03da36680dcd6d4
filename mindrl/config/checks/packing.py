"""Packed sequences and token-budget micro batches make sense before anything starts. Part of
validate.py's checks (one job: the pack_sequences / max_tokens_per_micro_batch keys)."""

from __future__ import annotations

from mindrl.config import names
from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig


def has_token_budget(run: RunConfig, role: str) -> bool:
    return run.role(role).max_tokens_per_micro_batch is not None


def check_packing(run: RunConfig) -> list[Problem]:
    """A token budget needs packed rows and room for the longest sample a step can hold
    (max_prompt_length + max_tokens); a forward micro batch size is a row count, which a
    role planning by tokens would not read."""
    out: list[Problem] = []
    rl = run.rl_config
    longest = rl.max_prompt_length + run.generate_config.sampling_config.max_tokens
    forward_keys = {"actor": "actor_forward_micro_batch_size",
                    "ref": "ref_forward_micro_batch_size"}
    for role in run.active_roles:
        cfg = run.role(role)
        budget = cfg.max_tokens_per_micro_batch
        if budget is None:
            continue
        key = names.role_key(run, role, "max_tokens_per_micro_batch")
        if not cfg.pack_sequences:
            out.append(Problem(key, "needs packed sequences (padded rows of varying counts "
                               "would break the pipeline's fixed shapes)",
                               f"set {names.role_key(run, role, 'pack_sequences')} true, or "
                               "use micro_batch_size", budget))
        elif budget < longest:
            out.append(Problem(key, f"is smaller than the longest sample a step can hold: "
                               f"max_prompt_length {rl.max_prompt_length} + max_tokens "
                               f"{longest - rl.max_prompt_length} = {longest} tokens",
                               f"set it to at least {longest}", budget))
        forward = forward_keys.get(role)
        if forward and getattr(rl, forward) is not None:
            out.append(Problem(f"rl_config.{forward}", f"is a row count, but the {role} plans "
                               f"its micro batches by {key}", f"remove rl_config.{forward}",
                               getattr(rl, forward)))
    return out
