"""Mixture-of-Experts settings fit the model and what MindRL runs today. Part of validate.py's
checks (one job: the moe_* and expert-parallel keys against each role's model).

A MoE key on a dense model would be silently ignored by Megatron, so it is refused naming the
key. Training expert parallelism must fit the role's layout (experts divisible by EP; the
expert grid inside each pipeline stage: expert TP x EP divides TP x DP, world = TP x PP x DP;
expert TP divides the TP, null = the TP, Megatron's default; on CPU no expert TP > 1 at EP > 1,
where the alltoall dispatcher all-gathers uneven sizes, which gloo cannot). vLLM's expert
parallelism runs inside one engine, over its infer-TP ranks (EP = infer TP, experts whole on
each rank), on device kinds whose vLLM build runs it (platforms/vllm_abilities.py: not the CPU
build, whose MoE kernel crashes with EP); EP across engines (vLLM's data parallelism, which
MindSpeed-RL's vLLM EP above its TP is) is refused: MindRL's engines are independent replicas.
"""

from __future__ import annotations

from dataclasses import fields

from mindrl.config import names
from mindrl.config.cluster import ClusterResources
from mindrl.config.errors import CLUSTER, Problem
from mindrl.config.placement import data_parallel_size, expert_tensor_parallel_size, world_size
from mindrl.config.schema import MegatronConfig, RunConfig
from mindrl.platforms.vllm_abilities import abilities

# Each MoE key and its dense-model value (the schema's default).
MOE_KEYS = {f.name: f.default for f in fields(MegatronConfig)
            if f.name.startswith("moe_") or f.name.startswith("expert_")}


def _dense_role(run: RunConfig, role: str) -> list[Problem]:
    cfg, spec = run.role(role), run.models[role]
    return [Problem(names.role_key(run, role, key), f"is a Mixture-of-Experts setting, and "
                    f"{spec.name} ({spec.architecture}, the {role}'s model) has no experts",
                    f"remove it (MoE families: {', '.join(names.MOE_ARCHITECTURES)})",
                    getattr(cfg, key))
            for key, default in MOE_KEYS.items() if getattr(cfg, key) != default]


def _moe_role(run: RunConfig, role: str, cluster: ClusterResources) -> list[Problem]:
    cfg = run.role(role)
    key = lambda name: names.role_key(run, role, name)  # noqa: E731
    out = []
    out += _expert_parallel(run, role)
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
                           "set moe_router_load_balancing_type: seq_aux_loss, or the coefficient "
                           "to 0", cfg.moe_aux_loss_coeff))
    return out


def _expert_parallel(run: RunConfig, role: str) -> list[Problem]:
    """EP splits the experts evenly; expert TP divides the TP; the expert grid (expert TP x
    EP) sits inside each pipeline stage's TP x DP ranks."""
    cfg, spec = run.role(role), run.models[role]
    ep, name = cfg.expert_model_parallel_size, names.role_key(run, role,
                                                            "expert_model_parallel_size")
    if ep < 1:
        return [Problem(name, "must be at least 1", "set it to 1 (no expert parallelism)", ep)]
    out = _expert_tp(run, role)
    if out and out[0].category != CLUSTER:
        return out               # an expert TP that does not divide the TP: nothing else fits
    if spec.moe.num_experts % ep:
        out.append(Problem(name, f"does not divide {spec.name}'s {spec.moe.num_experts} "
                           f"experts", "use a divisor of it", ep))
    dp, tp, etp = (data_parallel_size(run, role), cfg.tensor_model_parallel_size,
                   expert_tensor_parallel_size(cfg))
    if etp != tp and dp and (tp * dp) % (etp * ep):
        out.append(Problem(name, f"times expert TP {etp} ({etp * ep} ranks) does not divide "
                           f"the {tp * dp} ranks of each of the {role}'s pipeline stages (TP "
                           f"{tp} x DP {dp}): Megatron lays the expert grid (expert TP x EP x "
                           f"expert DP) over them", f"use a divisor of {tp * dp // etp}, or "
                           f"give the {role} more devices", ep))
    elif etp == tp and ep > 1 and dp and dp % ep:
        out.append(Problem(name, f"does not divide the {role}'s data parallelism {dp} "
                           f"(= {world_size(run, role)} devices / TP "
                           f"{cfg.tensor_model_parallel_size} x PP "
                           f"{cfg.pipeline_model_parallel_size}): expert-parallel ranks are "
                           f"carved out of data-parallel ones", f"use a divisor of {dp}, or "
                           f"give the {role} more devices", ep))
    if ep > 1 and cfg.moe_token_dispatcher_type == "allgather":   # given: null picks alltoall
        fix = "set it to alltoall, or null (the dispatcher the layout needs: alltoall at EP > 1)"
        out.append(Problem(names.role_key(run, role, "moe_token_dispatcher_type"), f"is "
                           f"allgather at expert parallelism {ep}: it needs equal token counts "
                           f"on every EP rank, and each data-parallel rank's micro batches are "
                           f"as long as its own samples", fix, "allgather"))
    return out


def _expert_tp(run: RunConfig, role: str) -> list[Problem]:
    """Expert TP: at least 1, a divisor of the TP (the weight sync reads expert shards inside
    the TP group), and on CPU not above 1 at EP > 1 (measured: gloo refuses the all-gather)."""
    cfg = run.role(role)
    etp, tp = cfg.expert_tensor_parallel_size, cfg.tensor_model_parallel_size
    name = names.role_key(run, role, "expert_tensor_parallel_size")
    if etp is not None and (etp < 1 or tp % etp):
        return [Problem(name, f"must divide the {role}'s TP {tp}: an expert's shards sit on "
                        f"TP ranks of one replica (where the weight sync reads them)",
                        f"set it to 1 (whole experts over the TP x EP ranks, MindSpeed-RL's "
                        f"moe_tp_extend_ep), to {tp}, or null (the TP)", etp)]
    etp, ep = expert_tensor_parallel_size(cfg), cfg.expert_model_parallel_size
    if etp < tp and ep == 1:
        # Megatron marks expert weights for the expert-DP reduction only at EP > 1: at EP 1 the
        # TP ranks' copies of an expert each step on their own tokens' gradient (measured:
        # the updates of TP2 expert-TP 1 EP1 differ from TP2's by the whole step).
        return [Problem(name, f"is {etp}, below the {role}'s TP {tp}, at expert parallelism "
                        f"1: Megatron reduces expert gradients over the ranks that copy an "
                        f"expert only at EP > 1, so the {tp // etp} copies on the TP ranks "
                        f"would drift apart", f"raise expert_model_parallel_size to {tp // etp} "
                        f"(or a multiple that fits) to spread the experts over the TP ranks, "
                        f"or set it to null (the TP)", etp)]
    res = run.resource(role)
    on_cpu = res is not None and len(res.items()) == 1 and res.kind == "cpu"
    if on_cpu and etp > 1 and ep > 1:
        given = "" if cfg.expert_tensor_parallel_size is not None else " (null: the TP)"
        return [Problem(name, f"is {etp}{given} at expert parallelism {ep} on CPU: the "
                        f"alltoall dispatcher all-gathers over the expert-TP ranks the tokens "
                        f"each routed to this EP rank's experts, uneven sizes that gloo (the "
                        f"CPU backend) cannot gather",
                        "set it to 1 (whole experts over the TP x EP ranks, MindSpeed-RL's "
                        "moe_tp_extend_ep), or expert_model_parallel_size to 1",
                        cfg.expert_tensor_parallel_size, CLUSTER)]
    return []


def check_moe(run: RunConfig, cluster: ClusterResources) -> list[Problem]:
    """Every active role's MoE keys against its model; vLLM's expert parallelism."""
    out: list[Problem] = []
    for role in run.active_roles:
        if run.models[role].is_moe:
            out += _moe_role(run, role, cluster)
        else:
            out += _dense_role(run, role)
    return out + _infer_expert_parallel(run)


def _infer_expert_parallel(run: RunConfig) -> list[Problem]:
    """vLLM's expert parallelism (infer_expert_parallel_size > 1 or enable_expert_parallel):
    a MoE actor, EP = infer TP > 1 dividing the experts, a device kind whose build runs it."""
    gen = run.generate_config
    ep, tp = gen.infer_expert_parallel_size, gen.infer_tensor_parallel_size
    if ep == 1 and not gen.enable_expert_parallel:
        return []
    key, value = (("generate_config.infer_expert_parallel_size", ep) if ep != 1
                  else ("generate_config.enable_expert_parallel", True))
    off = "set it to 1" if ep != 1 else "set it to false"
    spec = run.models["actor"]
    if not spec.is_moe:
        return [Problem(key, f"splits a mixture-of-experts model's experts over vLLM ranks, "
                        f"and {spec.name} (the actor's model, {spec.architecture}) has no "
                        f"experts", off, value)]
    if ep < 1:
        return [Problem(key, "must be at least 1", "set it to 1 (no expert parallelism)", ep)]
    if ep != 1 and ep != tp:
        fix = (f"set it to {tp} (experts whole over each engine's ranks) or 1 (experts split "
               f"over infer TP)" if tp > 1 else
               f"{off} (experts whole on each engine), or raise infer_tensor_parallel_size "
               f"to {ep}")
        return [Problem(key, f"is {ep} at infer TP {tp}: vLLM's expert parallelism spans one "
                        f"engine's infer-TP ranks (EP = infer TP), and EP across engines "
                        f"(vLLM's data parallelism) is not wired: MindRL's engines are "
                        f"independent replicas", fix, ep)]
    if tp == 1:
        return [Problem(key, "asks for vLLM's expert parallelism at infer TP 1: an engine of "
                        "one rank has nothing to split", f"{off}, or raise "
                        f"infer_tensor_parallel_size", value)]
    out = []
    if spec.moe.num_experts % tp:
        out.append(Problem(key, f"splits {spec.name}'s {spec.moe.num_experts} experts over "
                           f"infer TP {tp} ranks, which does not divide them",
                           f"pick an infer_tensor_parallel_size that divides "
                           f"{spec.moe.num_experts}, or {off}", value))
    res = run.resource("actor")
    if res is not None and not abilities(res.kind).expert_parallel:
        out.append(Problem(key, f"asks for vLLM's expert parallelism, which {res.kind}'s vLLM "
                           f"build cannot run (vLLM's CPU MoE kernel crashes with it)",
                           f"{off} (the experts then split over infer TP)", value))
    return out
