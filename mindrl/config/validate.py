"""Does a recipe make sense, and does it fit this cluster? Checked once, before any worker.

Every problem names its dotted key, the value and the fix. Problems that depend on the
machine (cluster size, device kind, paths) carry a category so that plan mode can report
them as warnings while still refusing recipes that are wrong everywhere.
"""

from __future__ import annotations

import glob
import math
import os
from typing import Any, Iterable, Optional

from mindrl.config import names
from mindrl.config.async_checks import check_async
from mindrl.config.batch_checks import check_batches, divisors
from mindrl.config.cluster import ClusterResources, local_cluster
from mindrl.config.dtype_checks import check_bf16
from mindrl.config.errors import (CLUSTER, MACHINE_DEPENDENT, PATHS, STRUCTURE, ConfigError,
                                  Problem)
from mindrl.config.hf_files import IMAGE_PROCESSOR_FILES, PROCESSOR_FILES, has_image_processor
from mindrl.config.parse import parse
from mindrl.config.pipeline_stages import split_problem
from mindrl.config.placement import (devices_required, engine_devices, place_roles,
                                     rollout_data_parallel_size)
from mindrl.config.moe_checks import check_moe
from mindrl.config.replay_checks import check_replay
from mindrl.config.ported import check_ported
from mindrl.config.dapo_checks import check_dapo
from mindrl.config.packing_checks import check_packing
from mindrl.config.rl_checks import check_algorithm
from mindrl.config.scale_down import scale_down, with_cpu_slots
from mindrl.config.schema import ResourceSpec, RunConfig
from mindrl.device_kinds import BACKENDS



def _common_divisors(*values: int) -> list[int]:
    g = math.gcd(*values)
    return [d for d in range(1, g + 1) if g % d == 0]


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


def _resource_problem(key: str, res: Optional[ResourceSpec]) -> Optional[Problem]:
    if res is None:
        return None
    set_keys = [k for k, _ in res.items()]
    if len(set_keys) != 1:
        return Problem(key, f"sets {set_keys or 'no device count'}",
                       "give exactly one of num_npus, num_gpus, num_cpus",
                       category=STRUCTURE)
    if res.count < 1:
        return Problem(f"{key}.{set_keys[0]}", "must be at least 1",
                       "give the role at least one device", res.count)
    return None


def check_resources(run: RunConfig, cluster: ClusterResources) -> list[Problem]:
    """Counts are positive, of this cluster's kind, split into TP x PP, and fit the cluster."""
    out: list[Problem] = []
    for role in run.active_roles:
        key = f"rl_config.{names.ROLE_RESOURCES[role]}"
        res = run.resource(role)
        if res is None:
            why = ("kl_coef > 0 needs a reference model" if role == "ref"
                   else "reward_model=true needs devices for the reward model")
            out.append(Problem(key, f"is missing ({why})", f"add {key}: {{"
                               f"{cluster.resource_key}: N}} or colocate the role",
                               category=STRUCTURE))
            continue
        problem = _resource_problem(key, res)
        if problem:
            out.append(problem)
            continue
        rkey = f"{key}.{res.items()[0][0]}"
        if res.kind != cluster.device_type:
            out.append(Problem(rkey, f"asks for {res.kind} devices but the cluster has "
                               f"{cluster.device_type} ({cluster.describe()})",
                               f"use {key}.{cluster.resource_key}", res.count, CLUSTER))
        mp = run.role(role).model_parallel_size
        if mp >= 1 and res.count % mp:
            cfg = run.role(role)
            out.append(Problem(rkey, f"is not a multiple of TP x PP = "
                               f"{cfg.tensor_model_parallel_size} x "
                               f"{cfg.pipeline_model_parallel_size} ({role})",
                               f"use a multiple of {mp} devices", res.count))
    if any(p.category != CLUSTER for p in out):
        return out
    imp = run.generate_config.model_parallel_size
    actor = run.resource("actor")
    own = run.generate_config.rollout_devices
    if own < 0 or (own and imp >= 1 and own % imp):
        out.append(Problem("generate_config.rollout_devices",
                           "must be 0 (engines on the actor's devices) or a positive multiple "
                           f"of infer TP x PP = {imp}",
                           f"use 0 or a multiple of {imp}", own))
        return out
    if own:
        need, roles_need = devices_required(run), devices_required(run) - own
        if roles_need <= cluster.total_devices < need:   # roles too many: said below
            out.append(Problem("generate_config.rollout_devices",
                               f"asks for {own} device(s) of the engines' own after the roles' "
                               f"{roles_need}: {need} devices, but the cluster has "
                               f"{cluster.total_devices} ({cluster.describe()})",
                               f"lower it to at most {max(cluster.total_devices - roles_need, 0)}"
                               f", set 0 to run the engines on the actor's devices, or add "
                               f"nodes", own, CLUSTER))
    elif imp >= 1 and actor.count % imp:
        out.append(Problem("generate_config.infer_tensor_parallel_size",
                           f"x infer_pipeline_parallel_size = {imp} does not divide the "
                           f"actor's {actor.count} devices (vLLM runs on them)",
                           f"use an inference TP x PP dividing {actor.count}",
                           run.generate_config.infer_tensor_parallel_size))
    kinds = {run.resource(r).kind for r in run.active_roles}
    if len(kinds) > 1:
        out.append(Problem("rl_config.actor_resource", f"roles ask for mixed device kinds "
                           f"{sorted(kinds)}", "give every role the same kind of device"))
        return out
    for placed in place_roles(run):
        if placed.devices and max(placed.devices) >= cluster.total_devices:
            key = f"rl_config.{names.ROLE_RESOURCES[placed.role]}"
            res = run.resource(placed.role)
            need = max(p.devices[-1] for p in place_roles(run) if p.devices) + 1
            out.append(Problem(f"{key}.{res.items()[0][0]}", f"brings the run to {need} "
                               f"devices but the cluster has {cluster.total_devices} "
                               f"({cluster.describe()})", "lower the resource counts, "
                               "colocate roles (rl_config.colocate_actor_ref) or add nodes",
                               res.count, CLUSTER))
            break
    for index, span in enumerate(engine_devices(run)):
        if cluster.node_of(span[0]) != cluster.node_of(span[-1]):
            counts = sorted(set(cluster.node_device_counts))
            out.append(Problem("generate_config.infer_tensor_parallel_size",
                               f"x infer_pipeline_parallel_size = {len(span)}: rollout engine "
                               f"{index} would span devices {span[0]}-{span[-1]}, across nodes "
                               f"({cluster.describe()}; an engine's TP group stays on one node)",
                               f"use an inference TP x PP dividing each node's devices "
                               f"({', '.join(map(str, counts))})",
                               run.generate_config.infer_tensor_parallel_size, CLUSTER))
            break
    return out


def check_roles(run: RunConfig, cluster: ClusterResources) -> list[Problem]:
    """Each role's dtype flags agree and its backend suits the devices."""
    out: list[Problem] = []
    for role in run.active_roles:
        cfg = run.role(role)
        if cfg.bf16 and cfg.fp16:
            out.append(Problem(names.role_key(run, role, "fp16"), "and bf16 are both true",
                               "choose one params dtype", True))
        spec = run.models.get(role)
        if cfg.freeze_vision_tower and spec is not None and spec.vision is None:
            out.append(Problem(names.role_key(run, role, "freeze_vision_tower"),
                               f"is set but model {spec.name} has no vision tower",
                               "remove it: it applies to vision-language models", True))
        if spec is not None and spec.vision is not None and not cfg.load:
            out.append(Problem(names.role_key(run, role, "load"), f"is not set, but model "
                               f"{spec.name} has a vision tower whose HF config only a "
                               f"converted checkpoint records", "convert the VL model "
                               "(examples/ckpt/ckpt_convert_qwen25vl_hf2mcore.sh) and point "
                               "load at it", cfg.load))
        backend = cfg.distributed_backend
        want = BACKENDS[cluster.device_type]
        if backend is not None and backend != want:
            out.append(Problem(names.role_key(run, role, "distributed_backend"), f"does not suit "
                               f"{cluster.device_type} devices", f"use {want} or leave it "
                               "null to follow the device", backend, CLUSTER))
    actor = run.models.get("actor")
    if run.prepare.task == "vl" and actor is not None and actor.vision is None:
        out.append(Problem("prepare.task", f"makes image prompts, but model {actor.name} has "
                           f"no vision tower", "use a VL model (e.g. tiny-qwen25vl) or task "
                           "arith", "vl"))
    return out


def check_reward(run: RunConfig) -> list[Problem]:
    """Something scores the rollouts, and a reward model starts from its own trained weights
    (the reward role inherits megatron_training.load, the actor's checkpoint, unless told)."""
    rl = run.rl_config
    out: list[Problem] = []
    if not rl.rule_reward and not rl.reward_model:
        out.append(Problem("rl_config.reward_model", "is false while rl_config.rule_reward is "
                           "false: nothing scores the rollouts", "set rl_config.reward_model: "
                           "true (a reward model, reward_config) or rl_config.rule_reward: true "
                           "(verifier_function)", False))
    if not rl.reward_model:
        return out
    load = run.reward_config.load
    if load is None:
        out.append(Problem("reward_config.load", "is not set: a reward model needs trained "
                           "weights", "convert the HF reward model with cli/convert_ckpt.py "
                           "(docs/guides/reward-model.md) and point reward_config.load at it",
                           None))
    elif load == run.actor_config.load:
        out.append(Problem(names.role_key(run, "reward", "load"), "is the actor's checkpoint: a "
                           "reward model has a score head, not an LM head",
                           "set reward_config.load to a converted reward model", load))
    return out


def _path_exists(path: str) -> bool:
    """A file, a directory, or an indexed-dataset prefix (PREFIX*.bin/.idx/.jsonl ...)."""
    return os.path.exists(path) or bool(glob.glob(glob.escape(path) + "*"))


def check_paths(run: RunConfig) -> list[Problem]:
    """Tokenizer, data and checkpoints to load exist; kept apart because shipped GPU recipes
    name cluster paths that do not exist on a laptop."""
    out = []
    data = run.megatron_training.data_path
    if data is None:
        out.append(Problem("megatron_training.data_path", "is not set",
                           "point it at the preprocessed prompts", None, PATHS))
    elif not _path_exists(data):
        out.append(Problem("megatron_training.data_path", "does not exist",
                           "run the data preprocessing (examples/data) or fix the path",
                           data, PATHS))
    for role in run.active_roles:
        cfg = run.role(role)
        tok = cfg.tokenizer_name_or_path
        if tok is None:
            out.append(Problem(names.role_key(run, role, "tokenizer_name_or_path"), "is not set",
                               "point it at a tokenizer directory", None, PATHS))
        elif not os.path.exists(tok):
            out.append(Problem(names.role_key(run, role, "tokenizer_name_or_path"), "does not "
                               "exist", "point it at a local tokenizer directory", tok, PATHS))
        else:
            out += check_processor_files(run, role)
        if cfg.load is not None and not os.path.exists(cfg.load):
            out.append(Problem(names.role_key(run, role, "load"), "does not exist",
                               "convert the HF checkpoint (examples/ckpt) or set load: null "
                               "for a random start", cfg.load, PATHS))
    return _dedupe(out)


def check_processor_files(run: RunConfig, role: str) -> list[Problem]:
    """A vision-language role's tokenizer directory holds its image processor: training and
    preprocessing load the processor from there (models.processors.load_vl_processor), and a
    converted checkpoint may come without it (a bare save_pretrained). Checked by file name
    before any worker starts."""
    spec, tok = run.models.get(role), run.role(role).tokenizer_name_or_path
    if spec is None or spec.vision is None or tok is None or has_image_processor(tok):
        return []
    missing = " nor ".join(os.path.join(tok, name) for name in IMAGE_PROCESSOR_FILES)
    return [Problem(names.role_key(run, role, "tokenizer_name_or_path"),
                    f"has no image processor (neither {missing} exists), which the "
                    f"vision-language model {spec.name} needs to train and to preprocess data",
                    f"copy the original HF model's processor files ({', '.join(PROCESSOR_FILES)}"
                    f") into it, or point the key at a folder that has them: the original "
                    f"download, or one converted with cli/convert_ckpt.py --tokenizer-model "
                    f"<the original model's folder>", tok, PATHS)]


def _dedupe(problems: Iterable[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.key, p.message) not in seen:
            seen.add((p.key, p.message))
            out.append(p)
    return out


def find_problems(run: RunConfig, cluster: ClusterResources, *,
                  paths: bool = False) -> list[Problem]:
    """Every consistency, cluster and (optionally) path problem of a parsed recipe."""
    out = check_positive(run)
    if out:  # zero sizes would make the divisibility checks misleading
        return out
    out += check_parallelism(run)
    out += check_resources(run, cluster)
    out += check_batches(run)
    out += check_algorithm(run)
    out += check_async(run)
    out += check_packing(run)
    out += check_ported(run)
    out += check_dapo(run)
    out += check_roles(run, cluster)
    out += check_bf16(run, cluster)
    out += check_moe(run, cluster)
    out += check_replay(run)
    out += check_reward(run)
    if paths:
        out += check_paths(run)
    return _dedupe(out)


def check(raw: Any, cluster: Optional[ClusterResources] = None, *, check_paths: bool = False,
          recipe: Optional[str] = None) -> tuple[RunConfig, list[Problem]]:
    """Parse (raising ConfigError on shape problems) and list the remaining problems. A
    recipe scaled down (`+scale_down=D`, mindrl/config/scale_down.py) on a CPU cluster gets as
    many logical CPU slots as it needs."""
    scaled = scale_down(raw)
    run = parse(scaled, recipe=recipe)
    cluster = cluster or local_cluster()
    if scaled is not raw:
        cluster = with_cpu_slots(cluster, run)
    return run, find_problems(run, cluster, paths=check_paths)


def validate(raw: Any, cluster: Optional[ClusterResources] = None, *,
             check_paths: bool = False, recipe: Optional[str] = None) -> RunConfig:
    """The typed recipe, or one ConfigError listing every problem."""
    run, _ = validate_lenient(raw, cluster, check_paths=check_paths, recipe=recipe,
                              warn_only=())
    return run


def validate_lenient(raw: Any, cluster: Optional[ClusterResources] = None, *,
                     check_paths: bool = True, recipe: Optional[str] = None,
                     warn_only: Iterable[str] = MACHINE_DEPENDENT
                     ) -> tuple[RunConfig, list[Problem]]:
    """RunConfig plus the problems demoted to warnings (categories in warn_only: by default
    cluster and path problems, for plan mode); any other problem raises one ConfigError."""
    run, problems = check(raw, cluster, check_paths=check_paths, recipe=recipe)
    warn_only = set(warn_only)
    fatal = [p for p in problems if p.category not in warn_only]
    if fatal:
        raise ConfigError(fatal)
    return run, [p for p in problems if p.category in warn_only]


