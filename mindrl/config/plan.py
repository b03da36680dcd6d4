"""Plan (dry-run) mode: what a validated recipe will do on a cluster, as data and as text.

Pure functions of (RunConfig, ClusterResources): nothing is started, so a 7B recipe can be
planned on a CPU box, with cluster and path problems shown as warnings.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from mindrl.config.cluster import ClusterResources
from mindrl.config.errors import Problem
from mindrl.config.memory import (GIB, full_length_capacity, inference_weight_bytes,
                                  kv_bytes_per_token, train_state_bytes)
from mindrl.config.pipeline_stages import stage_layer_counts
from mindrl.config.placement import (data_parallel_size, devices_required, engine_devices,
                                     engines_colocated, expert_tensor_parallel_size,
                                     place_roles, rollout_data_parallel_size, rollout_devices)
from mindrl.config.schema import RunConfig


def _ratio(a: int, b: int) -> Optional[int]:
    return a // b if b and a % b == 0 else None


def batch_arithmetic(run: RunConfig) -> dict[str, Any]:
    """Samples per step, mini batches per step, micro batches per mini batch."""
    mt, rl = run.megatron_training, run.rl_config
    n, gbs, mini = rl.n_samples_per_prompt, mt.global_batch_size, rl.mini_batch_size
    dp = data_parallel_size(run, "actor")
    micro = run.actor_config.micro_batch_size
    mini_samples = mini * n
    per_mini = _ratio(mini_samples, micro)
    mini_batches = _ratio(gbs, mini)
    fwd = rl.actor_forward_micro_batch_size or micro
    return {
        "prompts_per_step": gbs,
        "n_samples_per_prompt": n,
        "samples_per_step": gbs * n,
        "mini_batch_prompts": mini,
        "mini_batch_samples": mini_samples,
        "mini_batches_per_step": mini_batches,
        "epochs": rl.epochs,
        "optimizer_steps_per_step": mini_batches * rl.epochs if mini_batches else None,
        "micro_batch_size": micro,
        "actor_dp": dp,
        "micro_batches_per_mini_batch": per_mini,
        "gradient_accumulation_steps": _ratio(mini_samples, micro * dp),
        "samples_per_dp_rank_per_mini_batch": _ratio(mini_samples, dp),
        "actor_forward_micro_batches_per_rank": _ratio(gbs * n, fwd * dp),
        "max_tokens_per_sample": (rl.max_prompt_length
                                  + run.generate_config.sampling_config.max_tokens),
        "pack_sequences": run.actor_config.pack_sequences,
        "max_tokens_per_micro_batch": run.actor_config.max_tokens_per_micro_batch,
    }


def _micro_batch_text(role: dict) -> str:
    rows = "packed" if role["pack_sequences"] else "padded"
    if role["max_tokens_per_micro_batch"] is not None:
        return f"micro_batch<={role['max_tokens_per_micro_batch']} tokens ({rows})"
    return f"micro_batch={role['micro_batch_size']} ({rows})"


def _micro_batches_text(b: dict) -> str:
    rows = ("packed rows of real tokens" if b["pack_sequences"]
            else "padded rows (to the longest sample)")
    if b["max_tokens_per_micro_batch"] is not None:
        return (f"  micro batches per mini batch: by tokens, <= "
                f"{b['max_tokens_per_micro_batch']} real tokens each, {rows}; "
                f"{b['samples_per_dp_rank_per_mini_batch']} samples per DP rank balanced over "
                f"DP {b['actor_dp']}, the same count on every rank; the old-log-prob pass "
                f"plans like the update")
    return (f"  micro batches per mini batch: {b['micro_batches_per_mini_batch']} of "
            f"{b['micro_batch_size']} samples over DP {b['actor_dp']} -> gradient "
            f"accumulation steps {b['gradient_accumulation_steps']} per DP rank; {rows}")


def _memory(run: RunConfig, cluster: ClusterResources,
            placements: dict[str, Any]) -> dict[str, Any]:
    """Bytes per device: each role's resident states, and the actor devices' two phases."""
    gen = run.generate_config
    raw: dict[str, dict[str, int]] = {}
    for role in run.active_roles:
        cfg, spec = run.role(role), run.models[role]
        tp, pp = cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size
        dp = data_parallel_size(run, role) or 1
        states = train_state_bytes(spec, tp, pp, dp, cfg.params_dtype,
                                   cfg.use_distributed_optimizer,
                                   cfg.decoder_first_pipeline_num_layers,
                                   cfg.decoder_last_pipeline_num_layers,
                                   expert_tensor_parallel_size(cfg),
                                   cfg.expert_model_parallel_size)
        if role != "actor":  # forward only: no gradients or optimizer
            states = {"params": states["params"]}
        raw[role] = states | {"total": sum(states.values())}

    itp, ipp = gen.infer_tensor_parallel_size, gen.infer_pipeline_parallel_size
    vllm_weights = inference_weight_bytes(run.models["actor"], itp, ipp, gen.dtype)
    if gen.kv_cache_memory_bytes is not None:
        kv = gen.kv_cache_memory_bytes
        kv_note = "generate_config.kv_cache_memory_bytes"
    elif cluster.device_memory_gib:
        kv = max(int(gen.gpu_memory_utilization * cluster.device_memory_gib * GIB)
                 - vllm_weights, 0)
        kv_note = f"gpu_memory_utilization={gen.gpu_memory_utilization} of device memory"
    else:
        kv, kv_note = None, (f"gpu_memory_utilization={gen.gpu_memory_utilization} of device "
                             "memory minus weights (device memory unknown)")

    colocated = sum(raw[r]["total"] for r in placements["actor"].shares_with)
    actor = raw["actor"]
    train_phase = actor["total"] + colocated
    kept = {"params": not gen.offload_train_param, "grads": not gen.offload_train_grad,
            "optimizer": not gen.offload_train_optimizer}
    gen_phase = (vllm_weights + (kv or 0) + colocated
                 + sum(v for k, v in actor.items() if k in kept and kept[k]))
    engine_device = None
    if not engines_colocated(run):   # vLLM on devices of its own: the actor's keep training's
        gen_phase, engine_device = train_phase, vllm_weights + (kv or 0)
    return {
        "roles": raw,
        "rollout": {"weights": vllm_weights, "kv_cache": kv, "kv_cache_source": kv_note,
                    **_kv_capacity(run, kv)},
        "actor_device_training_phase": train_phase,
        "actor_device_generation_phase": gen_phase,
        "rollout_device": engine_device,
        "device_memory": (int(cluster.device_memory_gib * GIB) if cluster.device_memory_gib
                          else None),
    }


def _kv_capacity(run: RunConfig, kv: Optional[int]) -> dict[str, Any]:
    """How many sequences at full length (the prompt budget plus the whole response budget:
    for an episode, every model and tool token) one engine's KV cache holds, against how many
    of a step's samples it runs at once (max_num_seqs, or fewer samples)."""
    gen, rl = run.generate_config, run.rl_config
    tokens = min(rl.max_prompt_length + gen.sampling_config.max_tokens, gen.max_model_len)
    samples = run.megatron_training.global_batch_size * rl.n_samples_per_prompt
    at_once = min(gen.max_num_seqs, -(-samples // max(rollout_data_parallel_size(run), 1)))
    per_token = kv_bytes_per_token(run.models["actor"], gen.infer_tensor_parallel_size,
                                   gen.infer_pipeline_parallel_size, gen.dtype)
    held = (None if kv is None else
            full_length_capacity(kv, per_token, tokens, gen.block_size))
    return {"full_length_tokens": tokens, "full_length_held": held, "at_once": at_once}


def make_plan(run: RunConfig, cluster: ClusterResources,
              warnings: Iterable[Problem] = ()) -> dict[str, Any]:
    """Placement, parallel layout, batch arithmetic and memory estimate as a plain dict."""
    placements = {p.role: p for p in place_roles(run)}
    needed = devices_required(run)      # the roles' and the engines' own, if any
    fits = (needed <= cluster.total_devices
            and run.resource("actor").kind == cluster.device_type)
    roles = {}
    for role, p in placements.items():
        cfg = run.role(role)
        roles[role] = {
            "model": run.models[role].name,
            "devices": list(p.devices),
            "nodes": sorted({cluster.node_of(d) for d in p.devices}) if fits else None,
            "rank_nodes": [cluster.node_of(d) for d in p.devices] if fits else None,
            "shares_with": list(p.shares_with),
            "host": p.host,
            "tp": cfg.tensor_model_parallel_size,
            "pp": cfg.pipeline_model_parallel_size,
            "dp": data_parallel_size(run, role),
            "micro_batch_size": cfg.micro_batch_size,
            "pack_sequences": cfg.pack_sequences,
            "max_tokens_per_micro_batch": cfg.max_tokens_per_micro_batch,
            "params_dtype": cfg.params_dtype,
        }
        first, last = cfg.decoder_first_pipeline_num_layers, cfg.decoder_last_pipeline_num_layers
        if (first, last) != (None, None):   # an uneven pipeline: each stage's layers
            roles[role]["stage_layers"] = stage_layer_counts(run.models[role].num_layers,
                                                             cfg.pipeline_model_parallel_size,
                                                             first, last)
        if run.models[role].is_moe:
            roles[role]["ep"] = cfg.expert_model_parallel_size
            roles[role]["etp"] = expert_tensor_parallel_size(cfg)
            roles[role]["experts"] = expert_holders(
                run.models[role].moe.num_experts, roles[role]["etp"],
                cfg.expert_model_parallel_size, list(p.devices))
    gen = run.generate_config
    idp = rollout_data_parallel_size(run)
    rollout = {
        "devices": list(rollout_devices(run)),
        "colocated": engines_colocated(run),
        "tp": gen.infer_tensor_parallel_size,
        "pp": gen.infer_pipeline_parallel_size,
        # vLLM's expert parallelism inside each engine (EP = infer TP), 1 without
        "ep": gen.infer_tensor_parallel_size if gen.expert_parallel else 1,
        "instances": idp,
        "engine_nodes": ([cluster.node_of(span[0]) for span in engine_devices(run)]
                         if fits else None),
        "prompts_per_instance": _ratio(run.megatron_training.global_batch_size, idp),
        "dtype": gen.dtype,
        "max_tokens": gen.sampling_config.max_tokens,
    }
    memory = _memory(run, cluster, placements)
    warnings = [str(w) for w in warnings]
    peak = max(memory["actor_device_training_phase"], memory["actor_device_generation_phase"])
    if memory["device_memory"] and peak > memory["device_memory"]:
        warnings.append(f"estimated peak {_size(peak)} on an actor device exceeds its "
                        f"{_size(memory['device_memory'])}: raise TP/PP, use the distributed "
                        "optimizer, offload, or lower gpu_memory_utilization")
    r = memory["rollout"]
    if r["full_length_held"] is not None and r["full_length_held"] < r["at_once"]:
        warnings.append(f"an engine's KV cache ({_size(r['kv_cache'])}) holds "
                        f"{r['full_length_held']} sequences at full length "
                        f"({r['full_length_tokens']} tokens) but runs up to {r['at_once']} at "
                        "once: vLLM preempts the rest and prefills them again when they grow "
                        "long; raise generate_config.kv_cache_memory_bytes (or "
                        "gpu_memory_utilization) or lower max_num_seqs")
    return {
        "recipe": run.recipe,
        "model": run.model.name,
        "model_parameters": run.model.num_parameters(),
        # What one token passes through (a MoE layer's top-k experts): the FLOPs' measure.
        "model_active_parameters": run.model.num_parameters(active=True),
        "cluster": {"device_type": cluster.device_type, "num_devices": cluster.num_devices,
                    "num_nodes": cluster.num_nodes, "total": cluster.total_devices,
                    "nodes": [{"label": n.label(i), "devices": n.num_devices}
                              for i, n in enumerate(cluster.nodes)]},
        "devices_required": needed,
        "device_kind_required": run.resource("actor").kind,
        "roles": roles,
        "rollout": rollout,
        "batch": batch_arithmetic(run),
        "images": _images(run),
        "episodes": _episodes(run),
        "objective": _objective(run),
        "fits_cluster": fits,
        "memory_bytes": memory,
        "warnings": warnings,
    }


def _episodes(run: RunConfig) -> Optional[dict[str, Any]]:
    """How an agent run's episodes go (trainer/agent.py, rollout/tool_episode.py,
    rollout/environment.py); None for single-turn episodes."""
    a = run.agent_config
    if not a.multi_turn:
        return None
    if a.environment is not None:
        return {"environment": a.environment, "reward": a.reward, "format": a.format,
                "max_turns": a.max_turns, "tokens": run.generate_config.sampling_config.max_tokens}
    return {"tools": list(a.tools), "format": a.format, "max_turns": a.max_turns,
            "tokens": run.generate_config.sampling_config.max_tokens,
            "tool_timeout_s": a.tool_timeout_s, "tool_workers": a.tool_workers,
            "max_tool_response_tokens": a.max_tool_response_tokens, "sandbox": a.sandbox,
            "call_bonus": a.call_bonus}


def _objective(run: RunConfig) -> dict[str, Any]:
    """What a sample's score is made of and what the update does with it, as the trainer
    assembles them (trainer/assemble.py, algorithms/objective.py)."""
    rl = run.rl_config
    terms = ([f"{w:g} x {name}" for name, w in zip(rl.verifier_function, rl.verifier_weight)]
             if rl.rule_reward else [])
    if rl.rule_reward and rl.overlong_buffer_len:
        terms.append(f"DAPO's overlong penalty (last {rl.overlong_buffer_len} tokens, down to "
                     f"-{rl.overlong_penalty_factor:g})")
    agent = run.agent_config
    if agent.environment is not None and agent.reward != "verifiers":
        env_term = f"the environment's reward ({agent.environment})"
        terms = [env_term] if agent.reward == "environment" else terms + [env_term]
    if rl.reward_model:
        terms.append(f"{rl.reward_model_weight:g} x the reward model's score")
    low, high = (rl.clip_ratio_low or rl.clip_ratio), (rl.clip_ratio_high or rl.clip_ratio)
    clip = f"clip {low:g}" if low == high else f"clip {low:g} / {high:g}"
    if rl.clip_ratio_c:
        clip += f", dual-clip {rl.clip_ratio_c:g}"
    update = [f"advantages {rl.adv_estimator}",
              f"loss {rl.policy_loss} ({clip}), {rl.loss_agg_mode}",
              ("no KL term" if not rl.kl_coef > 0 else
               f"KL {rl.kl_penalty} x {rl.kl_coef:g} in the "
               f"{'loss' if rl.use_kl_loss else 'reward'}")]
    if rl.entropy_coeff > 0:
        update.append(f"entropy bonus {rl.entropy_coeff:g}" + (
            f" -> {rl.entropy_coeff_final:g} over {rl.entropy_decay_steps} steps"
            if rl.entropy_coeff_final is not None else ""))
    if rl.uses_teacher:
        alone = "" if rl.distill_use_task_reward else ", alone (no policy-gradient term)"
        update.append(f"distillation {rl.distill_loss} ({rl.distill_estimator}) x "
                      f"{rl.distill_coef:g} against the teacher {run.models['teacher'].name}"
                      f"{alone}")
    if rl.dynamic_sampling:
        update.append(f"dynamic sampling (up to {rl.max_gen_rounds} rounds)")
    if rl.rollout_is != "off":
        update.append(f"rollout IS {rl.rollout_is} (cap {rl.rollout_is_cap:g})")
    if rl.router_replay != "off":
        update.append(f"routing replay {rl.router_replay}")
    if run.agent_config.multi_turn and run.agent_config.call_bonus:
        terms.append(f"{run.agent_config.call_bonus:g} x a tool answered a call")
    return {"score_terms": terms,
            "verifiers": ({"processes": rl.verifier_parallel, "timeout_s": rl.verifier_timeout,
                           "modules": list(rl.verifier_modules)} if rl.rule_reward else None),
            "update": update}


def _images(run: RunConfig) -> Optional[dict[str, Any]]:
    """How a VL actor's images travel (None for a text model)."""
    vision = run.models["actor"].vision
    if vision is None:
        return None
    return {"tower": f"{vision.family}, depth {vision.depth}",
            "tower_trains": not run.actor_config.freeze_vision_tower,
            "pixel_dtype": run.pixel_dtype}


def _size(n: Optional[int]) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", GIB), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n:,}"


def _ranges(devices: list[int], most: int = 6) -> str:
    """Sorted device ids as runs ("0-1,8-9"); past `most` runs the first few, "...", the last
    and the count (an expert's holders over 16 pipeline stages are 16 runs)."""
    if not devices:
        return "-"
    runs: list[list[int]] = []
    for d in sorted(devices):
        if runs and d == runs[-1][1] + 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    if len(text) > most:
        return ",".join(text[:most - 2] + ["...", text[-1]]) + f" ({len(devices)} devices)"
    return ",".join(text)


def _parameters(plan: dict[str, Any]) -> str:
    total, active = plan["model_parameters"], plan["model_active_parameters"]
    if active == total:
        return f"{_count(total)} parameters"
    return f"{_count(total)} parameters, {_count(active)} active per token"


def expert_holders(num_experts: int, etp: int, ep: int, devices: list) -> list[dict[str, Any]]:
    """Which devices hold which experts of every MoE layer: Megatron lays each stage's expert
    grid expert TP fastest, then EP, then expert DP, so rank r is at EP rank (r // ETP) % EP and
    holds that rank's consecutive block of experts (a 1/ETP shard of each; whole at ETP 1).
    Empty when EP does not divide the experts."""
    if ep < 1 or etp < 1 or num_experts % ep:
        return []
    n = num_experts // ep
    return [{"experts": f"{e * n}-{(e + 1) * n - 1}",
             "devices": [d for r, d in enumerate(devices) if (r // etp) % ep == e]}
            for e in range(ep)]


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as the text a person reads before launching."""
    c, b, m = plan["cluster"], plan["batch"], plan["memory_bytes"]
    lines = [f"plan for recipe {plan['recipe'] or '<unnamed>'}: model {plan['model']} "
             f"({_parameters(plan)})",
             f"cluster: {c['num_nodes']} node(s) x {c['num_devices']} {c['device_type']} = "
             f"{c['total']} device(s); recipe needs {plan['devices_required']} "
             f"{plan['device_kind_required']} device(s)",
             ]
    lines += [f"  {n['label']}: {n['devices']} {c['device_type']} device(s)" for n in c["nodes"]]
    lines += ["", "placement:"]
    for role, r in plan["roles"].items():
        share = f", shared with {', '.join(r['shares_with'])}" if r["shares_with"] else ""
        if r["host"]:
            share += f", inside the {r['host']}'s processes"
        nodes = (f"nodes {','.join(map(str, r['nodes']))}" if r["nodes"] is not None
                 else "does not fit this cluster")
        lines.append(f"  {role:<7} devices {_ranges(r['devices'])} ({nodes}{share}): "
                     f"TP={r['tp']} PP={r['pp']} "
                     f"DP={r['dp']} {_micro_batch_text(r)} {r['params_dtype']} "
                     f"[{r['model']}]")
        if r["rank_nodes"] and c["num_nodes"] > 1:
            lines.append(f"          node of each rank: {r['rank_nodes']}")
        if r.get("stage_layers"):
            lines.append(f"          layers per pipeline stage: "
                         f"{', '.join(map(str, r['stage_layers']))}")
        if r.get("ep", 1) > 1 or r.get("etp", r["tp"]) != r["tp"]:
            held = (f" expert-TP={r['etp']} ({'whole experts' if r['etp'] == 1 else 'shards'})"
                    if r["etp"] != r["tp"] else "")
            lines += [f"          EP={r['ep']}{held}: experts {h['experts']} of every MoE "
                      f"layer on devices {_ranges(h['devices'])}" for h in r["experts"]]
    ro = plan["rollout"]
    where = "on the actor's" if ro["colocated"] else "their own: generate_config.rollout_devices"
    ep = f" EP={ro['ep']} (experts whole over an engine's ranks)" if ro.get("ep", 1) > 1 else ""
    lines.append(f"  rollout devices {_ranges(ro['devices'])} ({where}): vLLM TP="
                 f"{ro['tp']}{ep} PP={ro['pp']} x {ro['instances']} instance(s), "
                 f"{ro['prompts_per_instance']} prompts each, {ro['dtype']}")
    if ro["engine_nodes"] and c["num_nodes"] > 1:
        lines.append(f"          node of each engine: {ro['engine_nodes']}")
    lines += ["", "batch per step:",
              f"  prompts {b['prompts_per_step']} x samples {b['n_samples_per_prompt']} = "
              f"{b['samples_per_step']} samples (<= {b['max_tokens_per_sample']} tokens each)",
              f"  mini batches per step: {b['mini_batches_per_step']} of "
              f"{b['mini_batch_prompts']} prompts = {b['mini_batch_samples']} samples; "
              f"epochs {b['epochs']} -> {b['optimizer_steps_per_step']} optimizer step(s)",
              _micro_batches_text(b),
              ]
    if plan.get("images"):
        i = plan["images"]
        lines += [f"  images: each prompt's once per step; vLLM gets the images with one pad "
                  f"each, the actor and reference the processor's pixel values "
                  f"({i['pixel_dtype']}) and expanded ids; max_prompt_length counts the image "
                  f"tokens",
                  f"  vision tower ({i['tower']}): "
                  + ("trains with the model" if i["tower_trains"]
                     else "frozen (actor_config.freeze_vision_tower)")]
    if plan.get("episodes") and "environment" in plan["episodes"]:
        e = plan["episodes"]
        lines += ["", "episodes (multi-turn, with an environment):",
                  f"  environment {e['environment']} in format {e['format']}; at most "
                  f"{e['max_turns']} model turns and {e['tokens']} tokens (model and "
                  f"observation tokens together); observations inserted, attended, never "
                  f"trained; scored by agent_config.reward: {e['reward']}"]
    elif plan.get("episodes"):
        e = plan["episodes"]
        lines += ["", "episodes (multi-turn, with tools):",
                  f"  tools {', '.join(e['tools'])} in format {e['format']}; at most "
                  f"{e['max_turns']} model turns and {e['tokens']} tokens (model and tool "
                  f"tokens together); tool answers inserted, attended, never trained",
                  f"  calls in {e['tool_workers']} tool worker process(es), "
                  f"{e['tool_timeout_s']:g} s a call, answers cut at "
                  f"{e['max_tool_response_tokens']} tokens; sandbox {e['sandbox']} (the "
                  f"python tool)"]
    o = plan["objective"]
    lines += ["", "reward and update:", "  score = " + " + ".join(o["score_terms"])]
    if o["verifiers"]:
        v = o["verifiers"]
        lines.append(f"  verifiers in {v['processes']} worker process(es), {v['timeout_s']:g} s "
                     f"a sample" + (f"; your modules: {', '.join(v['modules'])}"
                                     if v["modules"] else ""))
    lines.append("  " + "; ".join(o["update"]))
    lines += ["", "memory per device (estimate; activations and buffers not included):"]
    for role, mem in m["roles"].items():
        parts = ", ".join(f"{k} {_size(v)}" for k, v in mem.items() if k != "total")
        lines.append(f"  {role:<7} {parts}; total {_size(mem['total'])}")
    r = m["rollout"]
    lines.append(f"  vLLM    weights {_size(r['weights'])}; KV cache {_size(r['kv_cache'])} "
                 f"({r['kv_cache_source']})")
    if r["full_length_held"] is not None:
        what = "episodes" if plan["episodes"] else "sequences"
        lines.append(f"          holds {r['full_length_held']} {what} at full length "
                     f"({r['full_length_tokens']} tokens: prompt and whole response budget); "
                     f"up to {r['at_once']} run at once on an engine")
    lines.append(f"  actor devices: training phase {_size(m['actor_device_training_phase'])}, "
                 f"generation phase {_size(m['actor_device_generation_phase'])}"
                 + (f" of {_size(m['device_memory'])}" if m["device_memory"] else ""))
    if m["rollout_device"] is not None:
        lines.append(f"  rollout devices: {_size(m['rollout_device'])} each engine device")
    if plan["warnings"]:
        lines += ["", f"warnings ({len(plan['warnings'])}; fatal outside plan mode):"]
        lines += [f"  - {w}" for w in plan["warnings"]]
    return "\n".join(lines)
