"""Mixture-of-Experts settings fit the model and what MindRL runs today. Part of validate.py's
checks (one job: the moe_* and expert-parallel keys against each role's model).

A MoE key on a dense model would be silently ignored by Megatron, so it is refused naming the
key. Expert parallelism above 1 (training or vLLM) is the next issue's work (#39); until then a
recipe that asks for it (MindSpeed-RL's Qwen3-30B-A3B layout: EP2, vLLM EP8) is refused before
anything starts, naming the key and the value that runs.
"""

from __future__ import annotations

from dataclasses import fields

from mindrl.config import names
from mindrl.config.cluster import ClusterResources
from mindrl.config.errors import CLUSTER, Problem
from mindrl.config.schema import MegatronConfig, RunConfig

EP_ISSUE = "expert parallelism above 1 is issue #39's work (MindRL trains MoE at EP 1 today)"
# Each MoE key and its dense-model value (the schema's default).
MOE_KEYS = {f.name: f.default for f in fields(MegatronConfig)
            if f.name.startswith("moe_") or f.name == "expert_model_parallel_size"}


def _dense_role(run: RunConfig, role: str) -> list[Problem]:
    cfg, spec = run.role(role), run.models[role]
    return [Problem(names.role_key(run, role, key), f"is a Mixture-of-Experts setting, and "
                    f"{spec.name} ({spec.architecture}, the {role}'s model) has no experts",
                    f"remove it (MoE families: {', '.join(names.MOE_ARCHITECTURES)})",
                    getattr(cfg, key))
            for key, default in MOE_KEYS.items() if getattr(cfg, key) != default]


def _moe_role(run: RunConfig, role: str, cluster: ClusterResources) -> list[Problem]:
    cfg, spec = run.role(role), run.models[role]
    key = lambda name: names.role_key(run, role, name)  # noqa: E731
    out = []
    ep = cfg.expert_model_parallel_size
    if ep > 1:
        out.append(Problem(key("expert_model_parallel_size"), EP_ISSUE, "set it to 1", ep))
    elif ep >= 1 and spec.moe.num_experts % ep:
        out.append(Problem(key("expert_model_parallel_size"), f"does not divide {spec.name}'s "
                           f"{spec.moe.num_experts} experts", "use a divisor of it", ep))
    if cfg.tensor_model_parallel_size > 1 and not cfg.sequence_parallel:
        out.append(Problem(key("sequence_parallel"), f"is off with TP "
                           f"{cfg.tensor_model_parallel_size}: Megatron's MoE layer needs "
                           f"sequence parallelism at TP > 1", "set sequence_parallel: true",
                           False))
    if cfg.moe_aux_loss_coeff < 0:
        out.append(Problem(key("moe_aux_loss_coeff"), "must be >= 0 (0 = off)",
                           "set it to 0 (off, as RL peers train) or a small positive weight",
                           cfg.moe_aux_loss_coeff))
    elif cfg.moe_aux_loss_coeff > 0 and cfg.moe_router_load_balancing_type == "none":
        out.append(Problem(key("moe_aux_loss_coeff"), "weights a load-balancing loss that "
                           "moe_router_load_balancing_type: none turns off",
                           "set moe_router_load_balancing_type: aux_loss, or the coefficient "
                           "to 0", cfg.moe_aux_loss_coeff))
    if cfg.moe_grouped_gemm:
        # Megatron's grouped experts hold stacked weight1/weight2 where the tensor tables
        # (conversion, weight sync, fingerprints) name one linear_fc1/fc2 per expert.
        out.append(Problem(key("moe_grouped_gemm"), "asks for Megatron's grouped expert GEMM, "
                           "whose stacked weights the checkpoint and sync tables do not map "
                           "yet; the experts run one by one (SequentialMLP, the same maths)",
                           "set it to false or null", True))
    return out


def check_moe(run: RunConfig, cluster: ClusterResources) -> list[Problem]:
    """Every active role's MoE keys against its model; vLLM's expert parallelism."""
    out: list[Problem] = []
    for role in run.active_roles:
        if run.models[role].is_moe:
            out += _moe_role(run, role, cluster)
        else:
            out += _dense_role(run, role)
    gen = run.generate_config
    if gen.infer_expert_parallel_size > 1:
        out.append(Problem("generate_config.infer_expert_parallel_size", "shards a "
                           "mixture-of-experts model's experts over vLLM ranks: " + EP_ISSUE +
                           "; on CPU vLLM's MoE kernel crashes with it", "set it to 1",
                           gen.infer_expert_parallel_size))
    return out
