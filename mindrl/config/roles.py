"""Each Megatron role's typed setup (actor, ref, reward, teacher), built from the validated
RunConfig.

The trainer hands a `RoleSetup` to every rank of a role; the rank builds its engine from it
and nothing else. These are plain, torch-free dataclasses, so config can build them and the
engines and builders below the trainer can read them without importing the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from mindrl.config.checks.asynchronous import rollout_correction
from mindrl.config.model_spec import ModelSpec
from mindrl.config.placement import token_dispatcher_type
from mindrl.config.schema import LoraConfig, RunConfig


@dataclass(frozen=True)
class Parallelism:
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    sequence_parallel: bool = False
    # Mixture-of-Experts' expert parallelism: each MoE layer's experts split over this many
    # ranks; expert TP x EP ranks inside a stage's TP x DP (config/checks/moe.py checks it fits).
    expert_model_parallel_size: int = 1
    # Uneven pipeline stages: the first / last stage's own layer count (None: the even split;
    # config/pipeline_stages.py).
    first_stage_layers: Optional[int] = None
    last_stage_layers: Optional[int] = None
    # Expert tensor parallelism: each expert split over this many ranks; None = the TP
    # (Megatron's default). 1 at TP > 1: whole experts over the TP x EP ranks.
    expert_tensor_parallel_size: Optional[int] = None

    def __post_init__(self) -> None:
        ep = self.expert_model_parallel_size
        if ep < 1:
            raise ValueError(f"expert_model_parallel_size={ep} must be >= 1")
        etp = self.expert_tensor_parallel_size
        if etp is not None and (etp < 1 or self.tensor_model_parallel_size % etp):
            raise ValueError(f"expert_tensor_parallel_size={etp} must divide "
                             f"tensor_model_parallel_size={self.tensor_model_parallel_size}")

    @property
    def expert_tp(self) -> int:
        """The expert TP in effect (the TP when expert_tensor_parallel_size is None)."""
        etp = self.expert_tensor_parallel_size
        return self.tensor_model_parallel_size if etp is None else etp

    @property
    def model_parallel_layout(self) -> tuple:
        """(TP, PP, EP, expert TP): what the process groups are made of (sequence parallelism
        is a model setting on the same groups), so roles with equal layouts can share a
        process."""
        return (self.tensor_model_parallel_size, self.pipeline_model_parallel_size,
                self.expert_model_parallel_size, self.expert_tp)


@dataclass(frozen=True)
class MoETraining:
    """A MoE role's RL settings (the recipe's moe_* keys, config/checks/moe.py): Megatron's
    TransformerConfig values, and the router freeze, which the engine applies."""

    aux_loss_coeff: float = 0.0
    load_balancing_type: str = "seq_aux_loss"   # MindRL's per sample (models/moe_balance.py)
    router_dtype: Optional[str] = None     # None: the params dtype, as vLLM routes
    router_freeze: bool = False
    token_dispatcher_type: str = "allgather"
    grouped_gemm: Optional[bool] = None    # None: the family's choice (the device's)

    @property
    def per_sample_balance(self) -> bool:
        """The balancing loss is MindRL's per-sample one (the engine adds it; Megatron's
        own stays off), exact under any partition of the batch."""
        return self.aux_loss_coeff > 0 and self.load_balancing_type == "seq_aux_loss"

    def transformer_config(self) -> dict:
        """Overrides of the family's MoE TransformerConfig values."""
        megatron_own = not self.per_sample_balance
        out = dict(moe_aux_loss_coeff=self.aux_loss_coeff if megatron_own else 0.0,
                   moe_router_load_balancing_type=(self.load_balancing_type if megatron_own
                                                   else "aux_loss"),
                   moe_router_dtype=self.router_dtype,
                   moe_token_dispatcher_type=self.token_dispatcher_type)
        if self.grouped_gemm is not None:
            out["moe_grouped_gemm"] = self.grouped_gemm
        return out


@dataclass(frozen=True)
class LossConfig:
    """The actor's objective (rl_config keys); `policy_loss` names a POLICY_LOSSES entry."""

    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None
    clip_ratio_high: Optional[float] = None
    clip_ratio_c: Optional[float] = None
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    entropy_tokens: str = "all"        # all, or learning: samples with an advantage only
    use_kl_loss: bool = False
    kl_coef: float = 0.0
    kl_penalty: str = "low_var_kl"
    temperature: float = 1.0
    policy_loss: str = "ppo_clip"
    rollout_is: str = "off"            # ROLLOUT_CORRECTIONS: off, token, sequence
    rollout_is_cap: float = 2.0
    logprob_chunk_tokens: int = 512    # response tokens per fp32 log-softmax slab
    # On-policy distillation against the teacher role (algorithms/distill.py); None = off.
    distill_loss: Optional[str] = None     # DISTILL_LOSSES: reverse_kl
    distill_estimator: str = "k2"          # KL_ESTIMATORS: k1, k2, k3
    distill_coef: float = 1.0
    distill_use_task_reward: bool = False  # false: distillation alone (no policy gradient)


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-6
    min_lr: float = 0.0
    lr_decay_style: str = "constant"
    lr_warmup_fraction: float = 0.0
    weight_decay: float = 0.0
    clip_grad: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    train_iters: int = 1           # updates over the run (for the lr schedule)
    use_distributed_optimizer: bool = True


@dataclass(frozen=True)
class RoleSetup:
    """Everything a rank needs to build its engine (picklable, sent once)."""

    role: str
    spec: ModelSpec
    parallel: Parallelism
    params_dtype: str
    micro_batch_size: int
    seed: int
    load: Optional[str]            # mcore checkpoint root (the converter's output) or None
    optim: Optional[OptimConfig] = None   # the actor's; None for forward-only roles
    loss: LossConfig = LossConfig()
    pad_id: int = 0
    cpu_threads: int = 1           # torch threads of this rank (CPU device only)
    freeze_vision_tower: bool = False   # a VL model's tower and merger out of the optimizer
    pack_sequences: bool = False   # packed rows of real tokens in every pass
    max_tokens_per_micro_batch: Optional[int] = None   # micro batches by tokens (packed)
    moe: Optional[MoETraining] = None   # a MoE model's settings; None for a dense one
    lora: Optional[LoraConfig] = None   # the actor's adapters (models/lora.py)
    # "actor": this role is that role's base model with its adapters off (a LoRA actor's
    # reference), held by the actor's own engine: no model of its own is built.
    adapters_off_of: Optional[str] = None


def loss_config(run: RunConfig) -> LossConfig:
    rl = run.rl_config
    return LossConfig(clip_ratio=rl.clip_ratio, clip_ratio_low=rl.clip_ratio_low,
                      clip_ratio_high=rl.clip_ratio_high, clip_ratio_c=rl.clip_ratio_c,
                      policy_loss=rl.policy_loss, loss_agg_mode=rl.loss_agg_mode,
                      entropy_coeff=rl.entropy_coeff, entropy_tokens=rl.entropy_tokens,
                      use_kl_loss=rl.use_kl_loss and rl.kl_coef > 0, kl_coef=rl.kl_coef,
                      kl_penalty=rl.kl_penalty,
                      temperature=run.generate_config.sampling_config.temperature,
                      rollout_is=rollout_correction(rl), rollout_is_cap=rl.rollout_is_cap,
                      logprob_chunk_tokens=rl.logprob_chunk_tokens,
                      distill_loss=rl.distill_loss, distill_estimator=rl.distill_estimator,
                      distill_coef=rl.distill_coef,
                      distill_use_task_reward=rl.distill_use_task_reward)


def optim_config(run: RunConfig, role: str) -> OptimConfig:
    """The role's optimizer; its schedule counts optimizer steps: one per mini batch, epochs
    times per training step."""
    cfg, rl = run.role(role), run.rl_config
    updates_per_step = (run.megatron_training.global_batch_size // rl.mini_batch_size) * rl.epochs
    keys = {f.name: getattr(cfg, f.name) for f in fields(OptimConfig)}   # the role's keys
    return OptimConfig(**{**keys, "train_iters": cfg.train_iters * updates_per_step})


def moe_training(run: RunConfig, role: str) -> Optional[MoETraining]:
    cfg = run.role(role)
    if not run.models[role].is_moe:
        return None
    return MoETraining(cfg.moe_aux_loss_coeff, cfg.moe_router_load_balancing_type,
                       cfg.moe_router_dtype, cfg.moe_router_freeze,
                       token_dispatcher_type(cfg), cfg.moe_grouped_gemm)


def role_setup(run: RunConfig, role: str, pad_id: int) -> RoleSetup:
    """The actor trains (with an optimizer); ref, reward and teacher run forward passes only."""
    cfg = run.role(role)
    return RoleSetup(
        role=role, spec=run.models[role],
        parallel=Parallelism(cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size,
                             cfg.sequence_parallel, cfg.expert_model_parallel_size,
                             cfg.decoder_first_pipeline_num_layers,
                             cfg.decoder_last_pipeline_num_layers,
                             cfg.expert_tensor_parallel_size),
        params_dtype=cfg.params_dtype, micro_batch_size=cfg.micro_batch_size, seed=cfg.seed,
        load=cfg.load, optim=optim_config(run, role) if role == "actor" else None,
        loss=loss_config(run), pad_id=pad_id, cpu_threads=cfg.cpu_threads,
        freeze_vision_tower=cfg.freeze_vision_tower, pack_sequences=cfg.pack_sequences,
        max_tokens_per_micro_batch=cfg.max_tokens_per_micro_batch,
        moe=moe_training(run, role), lora=cfg.lora if role == "actor" else None,
        adapters_off_of="actor" if role == "ref" and run.actor_config.lora else None)
