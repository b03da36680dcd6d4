"""A run's parts, assembled once from the validated recipe: the prompt source and loader, the
rule rewards, the Megatron role groups, the rollout engine group, the weight sync and the
tracker. A loop (trainer/grpo_trainer.py) only drives them and a lifecycle
(trainer/lifecycle.py) starts and ends the run around them, so a second loop reuses both.

The order is the start-up's: prompt rows are read and the resume is planned before any Ray
worker starts (a bad row or a checkpoint that cannot be resumed fails fast), then every role
and engine starts at once (a reference at the actor's layout inside the actor's ranks:
config/placement.host_of), and the actor learns its engines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from mindrl import device
from mindrl.config.placement import host_of
from mindrl.config.roles import role_setup
from mindrl.config.schema import RunConfig
from mindrl.data.prompt_loader import PromptLoader
from mindrl.data.prompt_rows import extra_keys
from mindrl.rewards import OverlongConfig, RuleReward
from mindrl.rollout.engine_group import RolloutGroup
from mindrl.trainer.prompt_batches import PromptBatches
from mindrl.trainer.resume import ResumePlan, plan_resume
from mindrl.trainer.route_replay_step import engine_route_kwargs
from mindrl.trainer.agent import AgentParts, tool_prompt
from mindrl.trainer.tracking import Tracker
from mindrl.weight_sync.manager import WeightSync
from mindrl.workers.placement import create_placement
from mindrl.workers.worker_group import (ROLE_GROUPS, ActorGroup, HostedRoleGroup, RoleGroup,
                                         worker_env)


@dataclass
class RunParts:
    """What a loop drives. `data_metrics` (prompts skipped as over-long) is logged every step;
    `resume_plan` is None for a fresh run."""

    prompts: PromptBatches
    loader: PromptLoader
    val_rows: List[dict]
    reward: Optional[RuleReward]
    groups: Dict[str, RoleGroup]
    rollout: RolloutGroup
    weights: WeightSync
    tracker: Tracker
    save_dir: Path
    resume_plan: Optional[ResumePlan]
    data_metrics: Dict[str, float] = field(default_factory=dict)
    agent: Optional[AgentParts] = None     # agent_config with tools or an environment

    @property
    def actor(self) -> ActorGroup:
        return self.groups["actor"]

    @property
    def reward_model(self) -> Optional[RoleGroup]:
        return self.groups.get("reward")

    def sync_weights(self, version: int, **kwargs) -> Dict[str, float]:
        """One weight sync (weight_sync/manager.py); the engines then hold the actor's weights
        after `version` updates, the policy version their next samples carry. Refused while a
        generate is in flight: the weights would change under it (on CPU with shared weights
        the actor writes into the engine's parameters directly), and its samples' version
        would be wrong. With rl_config.inflight_sync the engines stage the sync and take it in
        between two decode steps, so generates in flight are expected (each token records
        its version: RolloutGroup.token_versions)."""
        if self.rollout.in_flight and not self.rollout.stages_weights:
            raise RuntimeError(f"weight sync to version {version} with {self.rollout.in_flight} "
                               f"generate(s) in flight: wait for them first")
        metrics = self.weights.sync(**kwargs)
        self.rollout.synced(version)
        return metrics


def _prompt_rows(prompts: PromptBatches, path: str, run_dir: Path, rejects_name: str,
                 metric: str, data_metrics: Dict[str, float], log, finish=None) -> List[dict]:
    """Token ids and extra keys; overlong prompts skipped, counted and listed in the run
    directory (trainer/prompt_batches.py); `finish`: an agent run's tools in the prompt."""
    rows, data_metrics[metric] = prompts.rows(path, run_dir / rejects_name, log, finish)
    return rows


def inflight_kwargs(rl) -> dict:
    """The engines' kwargs for rl_config.inflight_sync (none when off). A sync's call waits
    for the running decode step at most 0.9 of the phase deadline, so that a stuck engine
    fails first, named, rather than the actor's sync that waits for it."""
    if rl.inflight_sync == "off":
        return {}
    return {"inflight_sync": rl.inflight_sync, "gate_timeout_s": 0.9 * rl.phase_timeout_s}


def overlong_config(run: RunConfig) -> Optional[OverlongConfig]:
    """DAPO's overlong penalty on the rule score, ramping to the engines' response limit
    (generate_config.sampling_config.max_tokens); None when overlong_buffer_len is 0."""
    rl = run.rl_config
    if not rl.overlong_buffer_len:
        return None
    return OverlongConfig(run.generate_config.sampling_config.max_tokens,
                          rl.overlong_buffer_len, rl.overlong_penalty_factor)


def assemble(run: RunConfig, log: Callable[[str], None] = print) -> RunParts:
    """Every part of the run, its workers and engines started; `<run_dir>/workers.json`
    lists each role's pids."""
    rl, gen, shared = run.rl_config, run.generate_config, run.megatron_training
    run_dir = Path(run.run_dir)
    save_dir = Path(run.actor_config.save or run_dir / "checkpoints")
    prompts = PromptBatches.for_model(
        shared.tokenizer_name_or_path, run.models.get("actor"),
        extra_keys(shared.dataset_additional_keys), rl.max_prompt_length, run.pixel_dtype)
    data_metrics: Dict[str, float] = {}
    finish = tool_prompt(run, prompts.tokenizer)
    loader = PromptLoader(
        _prompt_rows(prompts, shared.data_path, run_dir, "prompt_rejects.jsonl",
                     "data/prompts_over_max_length", data_metrics, log, finish),
        shared.global_batch_size, seed=shared.seed, shuffle=not shared.no_shuffle)
    val_rows = (_prompt_rows(prompts, rl.val_data_path, run_dir, "val_prompt_rejects.jsonl",
                             "data/val_prompts_over_max_length", data_metrics, log, finish)
                [:rl.val_max_prompts] if rl.val_data_path else [])
    reward = (RuleReward(rl.verifier_function, rl.verifier_weight,
                         verifier_timeout=rl.verifier_timeout,
                         verifier_parallel=rl.verifier_parallel, overlong=overlong_config(run),
                         worker_imports=rl.verifier_modules)
              if rl.rule_reward else None)
    # After the verifier pool (its forkserver preloads the verifiers) and before any worker
    # starts: strict sandbox mode refuses a machine here, naming the layer.
    agent = AgentParts.start(run, prompts.tokenizer, log)
    resume_plan = plan_resume(run, save_dir)
    slots, engine_slots = create_placement(run)
    setups = {role: role_setup(run, role, prompts.pad_id) for role in run.active_roles}
    hosts = {role: host_of(run, role) for role in setups}
    groups: Dict[str, RoleGroup] = {
        role: ROLE_GROUPS[role](role, run.resource(role).count,
                                slots[role].placement_group, slots[role].first_bundle,
                                slots[role].resources_per_rank, rl.phase_timeout_s)
        for role in setups if not hosts[role]}
    for role, host in hosts.items():
        if host:
            groups[role] = HostedRoleGroup(role, groups[host])
    actor_cfg = run.actor_config
    shared_weights = device.weights_in_host_memory() and gen.cpu_weights == "shared"
    rollout = RolloutGroup(actor_cfg.tokenizer_name_or_path, gen, actor_cfg.seed,
                           engine_slots, worker_env(),
                           {"plain_cpu_linears": shared_weights, "share_weights": shared_weights,
                            "actor_dtype": actor_cfg.params_dtype,
                            "routes": bool(engine_route_kwargs(rl)),
                            **inflight_kwargs(rl)},
                           rl.phase_timeout_s)
    refs = {role: group.start_setup(setups[role],
                                    [setups[r] for r, host in hosts.items() if host == role])
            for role, group in groups.items() if not hosts[role]}
    pids = {role: groups[role].wait_setup(ref) for role, ref in refs.items()}
    pids.update({role: pids[host] for role, host in hosts.items() if host})
    pids["rollout"] = rollout.start()
    (run_dir / "workers.json").write_text(json.dumps(pids))   # role -> pid per rank
    actor: ActorGroup = groups["actor"]
    actor.attach_engines(rollout.engines, rollout.nodes, gen.reshard_bucket_mb)
    tracker = Tracker(run_dir, rl.use_tensorboard, rl.use_wandb, rl.wandb_project,
                      rl.wandb_exp_name, rl.wandb_mode, wandb_dir=rl.wandb_save_dir)
    return RunParts(prompts, loader, val_rows, reward, groups, rollout,
                    WeightSync(actor, gen.verify_sync), tracker, save_dir, resume_plan,
                    data_metrics, agent)
