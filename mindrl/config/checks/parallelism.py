"""Each role's TP and PP split its model (heads, query groups, the MLP, layers), and vLLM's
inference TP and PP do too; the inference TP and the actor's training TP divide one another
(weights reshard by whole slices); shared CPU weights are one unsharded engine's."""

from __future__ import annotations

import math

from mindrl.config import names
from mindrl.config.checks.batch import divisors
from mindrl.config.errors import Problem
from mindrl.config.pipeline_stages import split_problem
from mindrl.config.placement import rollout_data_parallel_size
from mindrl.config.schema import RunConfig


def _common_divisors(*values: int) -> list[int]:
    g = math.gcd(*values)
    return [d for d in range(1, g + 1) if g % d == 0]


def check_parallelism(run: RunConfig) -> list[Problem]:
    """Megatron splits heads, query groups and the MLP by TP, and layers by PP; vLLM too."""
    out: list[Problem] = []
    reported: set[str] = set()
    for role in run.active_roles:
        cfg, spec = run.role(role), run.models[role]
        tp_key = names.role_key(run, role, "tensor_model_parallel_size")
        pp_key = names.role_key(run, role, "pipeline_model_parallel_size")
        tp, pp = cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size
        if tp >= 1 and tp_key not in reported:
            for what, n in (("num_attention_heads", spec.num_attention_heads),
                            ("num_query_groups", spec.num_query_groups),
                            ("ffn_hidden_size", spec.ffn_hidden_size)):
                if n % tp:
                    ok = _common_divisors(spec.num_attention_heads, spec.num_query_groups,
                                          spec.ffn_hidden_size)
                    out.append(Problem(tp_key, f"does not divide {spec.name} {what}={n} "
                                       f"({role})", f"use a TP size in {ok}", tp))
                    reported.add(tp_key)
                    break
        first, last = cfg.decoder_first_pipeline_num_layers, cfg.decoder_last_pipeline_num_layers
        if pp >= 1 and pp_key not in reported and first is None and last is None \
                and spec.num_layers % pp:
            out.append(Problem(pp_key, f"does not divide {spec.name} num_layers="
                               f"{spec.num_layers} ({role})",
                               f"use a PP size in {divisors(spec.num_layers)}, or give the "
                               f"first and last stages their own counts "
                               f"(decoder_first/last_pipeline_num_layers)", pp))
            reported.add(pp_key)
        split_key = names.role_key(run, role, "decoder_first_pipeline_num_layers"
                                   if first is not None else "decoder_last_pipeline_num_layers")
        problem = (pp >= 1 and (first, last) != (None, None)
                   and split_problem(spec.num_layers, pp, first, last))
        if problem and split_key not in reported:
            out.append(Problem(split_key, f"does not fit {spec.name} ({role}): {problem}",
                               f"pick first + last + the stages between (each an equal share) "
                               f"that add up to num_layers={spec.num_layers} over PP {pp}",
                               first if first is not None else last))
            reported.add(split_key)

    gen, spec = run.generate_config, run.models["actor"]
    itp, ipp = gen.infer_tensor_parallel_size, gen.infer_pipeline_parallel_size
    key = "generate_config.infer_tensor_parallel_size"
    if itp >= 1:
        for what, n in (("num_attention_heads", spec.num_attention_heads),
                        ("num_query_groups", spec.num_query_groups)):
            if n % itp:
                ok = _common_divisors(spec.num_attention_heads, spec.num_query_groups)
                out.append(Problem(key, f"does not divide {spec.name} {what}={n}",
                                   f"use an inference TP size in {ok}", itp))
                break
        ttp = run.actor_config.tensor_model_parallel_size
        if ttp >= 1 and itp % ttp and ttp % itp:
            out.append(Problem(key, f"and the actor's training TP={ttp} do not divide one "
                               "another, so weights cannot be resharded by whole slices",
                               f"use an inference TP that divides or is a multiple of {ttp}",
                               itp))
    if gen.cpu_weights == "shared" and (itp, ipp) != (1, 1):
        out.append(Problem("generate_config.cpu_weights", "shared needs vLLM unsharded "
                           f"(infer TP x PP = {itp} x {ipp})",
                           "set infer_tensor/pipeline_parallel_size to 1, or cpu_weights: "
                           "packed", gen.cpu_weights))
    engines = rollout_data_parallel_size(run)
    if gen.cpu_weights == "shared" and engines > 1:
        out.append(Problem("generate_config.cpu_weights", f"shared is one engine's own "
                           f"weights, and the actor's devices host {engines} engines",
                           "use cpu_weights: packed (engines share each sync's bucket), or "
                           "one engine (infer TP x PP = the actor's devices)", gen.cpu_weights))
    if ipp >= 1 and spec.num_layers % ipp:
        out.append(Problem("generate_config.infer_pipeline_parallel_size",
                           f"does not divide {spec.name} num_layers={spec.num_layers}",
                           f"use one of {divisors(spec.num_layers)}", ipp))
    return out

