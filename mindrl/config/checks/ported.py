"""Keys of MindSpeed-RL's GRPO guide that MindRL does not implement beyond one value.

A config ported from MindSpeed-RL carries them; each is accepted at the value that
describes what MindRL does (so a ported recipe validates unchanged) and refused at any
other value, naming why and the fix, rather than silently ignored. Keys MindRL honours
under its own name (init_kl_coef, use_integrated_worker) are handled in parse.py and
schema.py; the rest of the guide's keys are MindRL keys already.
"""

from __future__ import annotations

from typing import Any

from mindrl.config.errors import Problem
from mindrl.config.names import ROLE_SECTIONS, ROLES
from mindrl.config.schema import RunConfig

STAGES = ("ray_grpo",)
_NO_RECOMPUTE = ("activation recomputation is not implemented in MindRL",
                 "remove it (to save activation memory lower micro_batch_size or raise "
                 "tensor/pipeline_model_parallel_size)")

# dotted key -> (the values MindRL accepts, why no other value, the fix)
ONLY_VALUES: dict[str, tuple[tuple[Any, ...], str, str]] = {
    "megatron_training.stage": (STAGES, "is not a stage MindRL has: it trains GRPO on Ray "
                                "only (no DPO, DAPO or PPO stage)",
                                f"set it to {' or '.join(STAGES)}, or remove it"),
    "megatron_training.recompute_granularity": ((None,), *_NO_RECOMPUTE),
    "megatron_training.recompute_method": ((None,), *_NO_RECOMPUTE),
    "megatron_training.recompute_num_layers": ((None,), *_NO_RECOMPUTE),
    "rl_config.kl_ctrl_type": (("fixed",), "is not a KL controller MindRL has: the KL "
                               "coefficient is constant (rl_config.kl_coef)",
                               "set it to fixed, or remove it"),
    "rl_config.log_max_throughput": ((False,), "asks for a per-worker maximum MindRL does "
                                     "not keep: perf/throughput is the step's tokens over "
                                     "its seconds", "set it to false, or remove it"),
    "rl_config.num_cpus_for_local_task": ((None,), "sizes a Ray local task MindRL does not "
                                          "start", "remove it"),
    "generate_config.torchair_graph": ((False,), "asks for a torchair graph mode MindRL's "
                                       "vLLM does not have (graphs follow "
                                       "generate_config.enforce_eager)",
                                       "set it to false, or remove it"),
    "megatron_training.no_pad_to_seq_lengths": ((None, True), "asks for samples padded to "
                                                "seq_length, which MindRL never does: "
                                                "Megatron passes pack real tokens",
                                                "set it to true, or remove it"),
    "megatron_training.finetune": ((None, True), "asks Megatron to resume the iteration and "
                                   "optimizer from `load:`; MindRL's `load:` holds weights only "
                                   "and a run resumes from its own save directory",
                                   "set it to true, or remove it"),
    "generate_config.num_scheduler_steps": ((1,), "asks for multi-step scheduling, which "
                                            "vLLM V1 (the engine MindRL runs) does not have",
                                            "set it to 1, or remove it"),
}


def _values(run: RunConfig, dotted: str) -> list[tuple[str, Any]]:
    """(key as the recipe wrote it, value): a megatron_training key is also each role's,
    reported under the role's section where that section overrides it."""
    section, key = dotted.split(".", 1)
    if section != "megatron_training":
        return [(dotted, getattr(getattr(run, section), key))]
    shared = getattr(run.megatron_training, key)
    out = [(dotted, shared)]
    for role in ROLES:
        value = getattr(run.role(role), key)
        if value != shared:
            out.append((f"{ROLE_SECTIONS[role]}.{key}", value))
    return out


def check_ported(run: RunConfig) -> list[Problem]:
    """Each MindSpeed-RL-only key at a value MindRL does not implement, refused up front."""
    out = []
    for dotted, (allowed, why, fix) in ONLY_VALUES.items():
        for key, value in _values(run, dotted):
            if value not in allowed:
                out.append(Problem(key, why, fix, value))
    return out
