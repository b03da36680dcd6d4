"""The typed shape of a recipe: one dataclass per section, field names = recipe keys.

Adding a recipe key means adding a field here (with its type and default); the parser
then accepts, type-checks and spell-checks it without further code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from mindrl.config.model_spec import ModelSpec
from mindrl.device_kinds import KIND_OF_RESOURCE_KEY

DeviceKind = Literal["npu", "cuda", "cpu"]

# megatron_training keys that describe the run, not a role: a role section may not
# override them (one global batch, one dataset, one schedule length for everybody).
RUN_WIDE_KEYS = ("global_batch_size", "train_iters", "data_path", "dataset_additional_keys",
                 "seq_length", "save_interval", "stage", "no_shuffle")


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters on the actor (docs/guides/lora.md): only they train; the reference is
    the actor's base with them off; the engines get the merged weights."""

    rank: int = 32
    alpha: float = 64.0               # the update is scaled by alpha / rank
    dropout: float = 0.0
    # Megatron's names of the adapted layers of every block (models/lora.TARGETS).
    target_modules: list[str] = field(
        default_factory=lambda: ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"])
    sync: Literal["merged", "adapter"] = "merged"   # what the rollout engines receive


@dataclass(frozen=True)
class MegatronConfig:
    """megatron_training, and each role after its *_config overrides are applied."""

    global_batch_size: int            # prompts per step (MindSpeed-RL convention)
    seq_length: int                   # prompt + response tokens per sample
    train_iters: int
    model: Optional[str] = None       # a configs/model name; null = the composed `model`
    tokenizer_name_or_path: Optional[str] = None
    data_path: Optional[str] = None   # file, directory or indexed-dataset prefix
    dataset_additional_keys: list[str] = field(default_factory=list)
    save_interval: Optional[int] = None
    seed: int = 1234
    bf16: bool = False
    fp16: bool = False
    use_distributed_optimizer: bool = True
    sequence_parallel: bool = False
    distributed_backend: Optional[Literal["nccl", "hccl", "gloo"]] = None  # null: from device
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    # Uneven pipeline stages (config/pipeline_stages.py): the first / last stage's own layer
    # count, the rest split evenly between; null = Megatron's even split. Megatron-LM's names.
    decoder_first_pipeline_num_layers: Optional[int] = None
    decoder_last_pipeline_num_layers: Optional[int] = None
    micro_batch_size: int = 1
    # Megatron passes on packed rows of real tokens (no padding; exact, config/checks/packing.py).
    pack_sequences: bool = True
    # Micro batches of at most this many real tokens, balanced over DP (packed only); null =
    # micro_batch_size samples each. The actor's forward pass plans like its update.
    max_tokens_per_micro_batch: Optional[int] = None
    lr: float = 1.0e-6
    lr_decay_style: Literal["constant", "cosine", "linear"] = "constant"
    min_lr: float = 0.0
    weight_decay: float = 0.0
    lr_warmup_fraction: float = 0.0
    clip_grad: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1.0e-8
    load: Optional[str] = None        # mcore checkpoint to start from; null = random init
    save: Optional[str] = None
    no_load_optim: bool = False
    no_load_rng: bool = False
    no_save_optim: bool = False
    no_save_rng: bool = False
    log_interval: int = 1
    cpu_threads: int = 1              # torch threads per rank on the CPU device (1 per core)
    # A VL model's vision tower and merger stay out of the optimizer (no gradients).
    freeze_vision_tower: bool = False
    lora: Optional[LoraConfig] = None   # the actor's adapters; null = full-parameter training
    # Mixture-of-Experts (a model whose family has experts; refused on a dense one:
    # config/checks/moe.py). Names and meanings are Megatron's / MindSpeed-RL's.
    expert_model_parallel_size: int = 1   # ETP x EP inside TP x DP; config/checks/moe.py
    # Expert TP: each expert split over this many ranks; null = the role's TP (Megatron's
    # default). 1 = whole experts over TP x EP ranks (MindSpeed-RL's moe_tp_extend_ep).
    expert_tensor_parallel_size: Optional[int] = None
    moe_aux_loss_coeff: float = 0.0       # load-balancing loss; off in RL (peers agree)
    moe_router_load_balancing_type: Literal["aux_loss", "seq_aux_loss", "none"] = "seq_aux_loss"
    moe_router_dtype: Optional[Literal["fp32", "fp64"]] = None   # null: the params dtype
    moe_router_freeze: bool = False       # router weights out of the optimizer
    # null: the one the role's layout needs (placement.token_dispatcher_type: alltoall at
    # EP > 1, allgather at EP 1).
    moe_token_dispatcher_type: Optional[Literal["allgather", "alltoall"]] = None
    moe_grouped_gemm: Optional[bool] = None   # null: the device kind's default
    # MindSpeed-RL keys (config/checks/ported.py): accepted at the one value MindRL implements.
    stage: str = "ray_grpo"                       # the algorithm; GRPO is the only one
    recompute_granularity: Optional[str] = None   # no activation recomputation: null only
    recompute_method: Optional[str] = None
    recompute_num_layers: Optional[int] = None
    no_pad_to_seq_lengths: Optional[bool] = None  # true/null only: packed, never padded
    finetune: Optional[bool] = None               # true/null only: `load:` holds weights only
    no_shuffle: bool = False          # prompts in file order every epoch (else seeded shuffle)

    @property
    def model_parallel_size(self) -> int:
        return self.tensor_model_parallel_size * self.pipeline_model_parallel_size

    @property
    def params_dtype(self) -> str:
        return "bfloat16" if self.bf16 else "float16" if self.fp16 else "float32"


@dataclass(frozen=True)
class ResourceSpec:
    """How many devices a role takes; exactly one of the three counts is set."""

    num_npus: Optional[int] = None
    num_gpus: Optional[int] = None
    num_cpus: Optional[int] = None

    def items(self) -> list[tuple[str, int]]:
        return [(k, v) for k, v in (("num_npus", self.num_npus), ("num_gpus", self.num_gpus),
                                    ("num_cpus", self.num_cpus)) if v is not None]

    @property
    def kind(self) -> str:
        key = self.items()[0][0]
        return KIND_OF_RESOURCE_KEY[key]

    @property
    def count(self) -> int:
        return self.items()[0][1]


@dataclass(frozen=True)
class RLConfig:
    """The algorithm and the step around it, grouped by concern (the keys are flat)."""

    # --- required: the actor's devices and the update's batch
    actor_resource: ResourceSpec
    mini_batch_size: int              # prompts per policy update

    # --- algorithm: advantages and the rewards they come from
    adv_estimator: str = "group_norm"
    gamma: float = 1.0
    lam: float = 0.95
    rule_reward: bool = True          # verifier_function scores the rollouts
    reward_model: bool = False        # the reward role (reward_config) scores them too
    reward_model_weight: float = 1.0  # score = rule score + reward_model_weight x model score
    verifier_function: list[str] = field(default_factory=list)
    verifier_weight: list[float] = field(default_factory=list)
    verifier_modules: list[str] = field(default_factory=list)   # your verifiers: modules, .py
    verifier_parallel: int = 1
    verifier_timeout: float = 30.0

    # --- objective: the actor's loss (config/roles.LossConfig, algorithms/objective.py)
    policy_loss: str = "ppo_clip"     # a POLICY_LOSSES name (mindrl/algorithms)
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None    # null = clip_ratio
    clip_ratio_high: Optional[float] = None   # null = clip_ratio
    clip_ratio_c: Optional[float] = None      # dual-clip PPO's cap (> 1, e.g. 3.0); null = off
    loss_agg_mode: str = "token-mean"
    kl_penalty: str = "low_var_kl"
    kl_coef: float = 0.0              # 0 = no KL term, so no reference model is started
    use_kl_loss: bool = True          # KL in the loss (GRPO) rather than in the reward
    # On-policy distillation (algorithms/distill.py, docs/guides/distillation.md): the teacher
    # role (teacher_config) scores the student's sampled tokens; null = off, no teacher.
    distill_loss: Optional[str] = None    # reverse_kl (forward_kl_topk: not built yet)
    distill_estimator: str = "k2"         # k1, k2, k3 (kl_penalty's); k2 descends the reverse KL
    distill_coef: float = 1.0             # the distillation term's weight (>= 0)
    distill_use_task_reward: bool = False   # true: GRPO's loss + distill_coef x the term
    entropy_coeff: float = 0.0                 # the entropy bonus's coefficient at step 1
    entropy_coeff_final: Optional[float] = None   # null = entropy_coeff throughout
    entropy_decay_steps: int = 0               # steps from entropy_coeff to entropy_coeff_final
    # which tokens the bonus counts: all, or learning (only samples with a non-zero advantage:
    # a step whose groups all agree then has no bonus to take full-size steps on alone)
    entropy_tokens: Literal["all", "learning"] = "all"
    # skip the actor's update of a step in which every sample's advantage is 0: its loss is
    # then the KL (and entropy) terms alone, which Adam scales to full-size steps
    skip_zero_advantage_updates: bool = False
    rollout_is: str = "off"           # truncated IS on old / rollout log-probs: off, token, sequence
    rollout_is_cap: float = 2.0       # the weights' upper bound (> 1)
    logprob_chunk_tokens: int = 512   # response tokens per fp32 log-softmax slab in the engines
    logprob_drift_threshold: Optional[float] = 1e-2   # rollout/logprob_diff_mean alarm; null = off
    logprob_drift_steps: int = 3      # consecutive steps above the threshold before it warns
    # MoE routing replay (docs/guides/routing-replay.md): r2 = the update replays the routes
    # of the old-log-prob pass; r3 = every Megatron pass replays the rollout engine's.
    router_replay: Literal["off", "r2", "r3"] = "off"
    # The engine's routes against the trainer's old-log-prob pass without replaying them (how
    # far apart they are before one turns r2 / r3 on): the engines return their routes and the
    # pass runs every step.
    log_route_agreement: bool = False

    # --- sampling and batching
    n_samples_per_prompt: int = 8
    epochs: int = 1
    shuffle_mini_batch: bool = False
    max_prompt_length: int = 1024
    dynamic_sampling: bool = False        # DAPO: drop groups whose samples all score the same
    max_gen_rounds: int = 3               # generation rounds per step to fill the batch
    # DAPO's soft overlong penalty on the rule score (rewards/overlong.py): 0 up to max_tokens
    # - overlong_buffer_len response tokens, then down to -overlong_penalty_factor at max_tokens.
    overlong_buffer_len: int = 0          # 0 = off
    overlong_penalty_factor: float = 1.0
    actor_forward_micro_batch_size: Optional[int] = None  # null = micro_batch_size
    ref_forward_micro_batch_size: Optional[int] = None
    blocking: bool = True

    # --- asynchronous GRPO (trainer/async_source.py, docs/guides/async.md): engines on devices
    # of their own generate the next batches while the actor trains; no sample trained on is
    # more than max_staleness policy versions old (one_step: 1). off: the synchronous loop.
    async_mode: Literal["off", "one_step", "bounded"] = "off"
    max_staleness: int = 1
    # Partial rollouts (rollout/partial.py): generate in chunks of at most this many new tokens
    # per sample, so a weight sync waits for a chunk, not a whole generation. null = off.
    partial_rollout_tokens: Optional[int] = None
    # A weight sync while the engines decode (engines/vllm_inflight.py): the sync writes a
    # second buffer that each engine takes in between two decode steps; the requests running
    # then keep their KV (keep_kv) or are prefilled again on the new weights (recompute_kv).
    # off: the sync waits for the batches in flight.
    inflight_sync: Literal["off", "keep_kv", "recompute_kv"] = "off"

    # --- resources and placement
    reference_resource: Optional[ResourceSpec] = None
    reward_resource: Optional[ResourceSpec] = None
    teacher_resource: Optional[ResourceSpec] = None
    colocate_actor_ref: bool = False
    colocate_all_models: bool = False
    colocate_actor_teacher: bool = False   # the teacher on the actor's devices
    teacher_in_actor_process: bool = True  # a colocated teacher at the actor's layout lives in
                                           # the actor's processes (config/placement.host_of)
    ref_in_actor_process: bool = True   # a colocated reference at the actor's layout lives in
                                        # the actor's processes (config/placement.host_of)

    # --- run control: time limits and checkpoints
    phase_timeout_s: float = 1800.0   # seconds any phase of a step may take before the run
                                      # stops with a failure report (trainer/failure_report.py)
    save_freq: Optional[int] = None   # null = megatron_training.save_interval
    save_limit: Optional[int] = None  # checkpoints kept; null = all

    # --- validation
    val_freq: Optional[int] = None
    val_data_path: Optional[str] = None   # jsonl prompt rows held out for validation
    val_before_train: bool = False
    val_n_samples: int = 1                # samples per validation prompt
    val_temperature: float = 0.0          # 0 = greedy
    val_max_prompts: Optional[int] = None  # first N rows; null = all

    # --- logging
    use_tensorboard: bool = True
    use_wandb: bool = False
    wandb_project: Optional[str] = None
    wandb_exp_name: Optional[str] = None
    wandb_mode: Literal["online", "offline"] = "offline"
    wandb_save_dir: Optional[str] = None   # wandb's local files; null = the run directory

    # --- MindSpeed-RL keys (config/checks/ported.py).
    # use_integrated_worker: true = colocate_all_models.
    use_integrated_worker: bool = False
    guarantee_order: bool = False          # no effect: rollouts always come back in order
    kl_ctrl_type: str = "fixed"            # fixed only: kl_coef is constant
    log_max_throughput: bool = False       # false only: one perf/throughput figure
    num_cpus_for_local_task: Optional[float] = None  # null only: no Ray local task
    # MindSpeed-RL's DAPO names (config/checks/dapo.py); overlong_buffer,
    # overlong_buffer_penalty_factor and filter_groups_enable are aliases (parse.ALIASES).
    token_level_loss: Optional[bool] = None        # true = loss_agg_mode token-mean
    clip_higher_enable: Optional[bool] = None      # false = clip_ratio_low/high unset or equal
    overlong_buffer_enable: Optional[bool] = None  # must agree with overlong_buffer_len > 0
    rollout_max_tokens: Optional[int] = None       # = sampling_config.max_tokens
    filter_groups_metric: Optional[str] = None     # = the one verifier the score is
    filter_groups_max_batches: Optional[int] = None   # -1: bounded by max_gen_rounds
    filter_groups_train_batch_size: Optional[int] = None   # = global_batch_size

    @property
    def uses_reference(self) -> bool:
        return self.kl_coef > 0

    @property
    def uses_teacher(self) -> bool:
        return self.distill_loss is not None

    @property
    def colocates_all(self) -> bool:
        """Every role on the actor's devices: MindRL's flag or MindSpeed-RL's name for it."""
        return self.colocate_all_models or self.use_integrated_worker


@dataclass(frozen=True)
class SamplingConfig:
    max_tokens: int = 1024
    logprobs: int = 1
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    temperature: float = 1.0
    detokenize: bool = False
    seed: Optional[int] = None
    min_tokens: int = 0               # no EOS before this many tokens
    ignore_eos: bool = False          # always generate max_tokens (benchmarks, fixed lengths)
    # Ids that end a turn besides EOS (kept in the output, finish "stop"); a multi-turn
    # episode adds its tool format's call end (agent_config).
    stop_token_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class GenerateConfig:
    """vLLM, which runs on the actor's devices between updates."""

    infer_tensor_parallel_size: int = 1
    infer_pipeline_parallel_size: int = 1
    infer_expert_parallel_size: int = 1   # 1 or the infer TP (config/checks/moe.py)
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 4096
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    gpu_memory_utilization: float = 0.5
    # CPU build: set it (docs/platforms.md#vllm-on-cpu).
    kv_cache_memory_bytes: Optional[int] = None
    block_size: Optional[int] = None
    enforce_eager: bool = False
    enable_prefix_caching: bool = False
    trust_remote_code: bool = False
    cpu_threads: int = 1                  # torch threads of the vLLM process (CPU device only)
    offload_train_optimizer: bool = False
    offload_train_grad: bool = False
    offload_train_param: bool = False
    sampling_config: SamplingConfig = field(default_factory=SamplingConfig)
    reshard_bucket_mb: float = 512.0      # Megatron -> vLLM weight sync bucket
    # Where the engines run (config/placement.py): 0 = on the actor's devices (colocated,
    # the synchronous loop's default); N = N devices of their own after every role's, N /
    # (infer TP x PP) engines (on CPU: CPU slots of their own).
    rollout_devices: int = 0
    # CPU device only. packed: vLLM's oneDNN-packed linears (a sync repacks them: ~5x a
    # memcpy). shared: plain weights in shared memory that the actor's ranks write directly
    # (a sync costs about one memcpy); decoding then uses torch's GEMM: 0.81x the tokens/s at
    # the qwen2.5-0.5b shape with 64 sequences, 1.19x at the 75M bench shape
    # (docs/platforms.md#weights-into-vllm-on-cpu).
    cpu_weights: Literal["packed", "shared"] = "packed"
    # Which weight syncs are verified (every engine's fingerprints against the tensors sent;
    # a mismatch stops the run naming the tensor and the engine): every sync, the first of
    # each run (the start, where a wrong mapping shows), or none.
    verify_sync: Literal["every", "first", "off"] = "every"
    # GPU/NPU, engines on the actor's devices: between rollouts they give their device memory
    # to the actor's passes. 1: weights to host memory, KV cache dropped; 2: both dropped (the
    # sync refills every weight, and every sync after such a wake is verified). 0: never.
    # vLLM's CPU build has no sleep mode: nothing sleeps there (a start-up notice says so).
    sleep_level: Literal[0, 1, 2] = 0
    # MindSpeed-RL keys (config/checks/ported.py), accepted at the value MindRL implements only.
    torchair_graph: bool = False          # false only: no torchair graph mode
    enable_expert_parallel: bool = False  # vLLM EP = infer TP (config/checks/moe.py)
    num_scheduler_steps: int = 1          # 1 only: vLLM V1 schedules one step at a time

    @property
    def model_parallel_size(self) -> int:
        return self.infer_tensor_parallel_size * self.infer_pipeline_parallel_size

    @property
    def expert_parallel(self) -> bool:
        """Whether each engine's experts split whole over its infer-TP ranks (vLLM's expert
        parallelism inside one engine, EP = infer TP): asked by enable_expert_parallel or by
        MindSpeed-RL's infer_expert_parallel_size (config/checks/moe.py holds it to infer TP)."""
        return self.enable_expert_parallel or self.infer_expert_parallel_size > 1


@dataclass(frozen=True)
class PrepareConfig:
    """Artifacts the run makes for itself when missing (the embedded CPU default): a tiny
    random-init HF model (at megatron_training.tokenizer_name_or_path; warm_start: warm-
    started first), its Megatron
    conversion (at megatron_training.load), a generated task file (at data_path) and, with
    rl_config.reward_model, a random-init reward model (reward_config.load, from `<load>-hf`);
    with rl_config.distill_loss, a random-init teacher of teacher_config.model
    (teacher_config.load, from `<load>-hf`)."""

    tiny_model: Optional[str] = None      # a configs/model name, e.g. tiny-qwen2
    tokenizer: Literal["char", "char_tools", "qwen25"] = "char"
    task: Optional[Literal["arith", "max", "vl", "arith_tool"]] = None
    num_prompts: int = 4096
    max_operand: int = 2
    holdout_pairs: int = 0                # operand pairs kept out of training: the validation set
    # task "vl": synthetic geometry3k-layout images (data/vl_task.py), preprocessed by the
    # dataset recipe `vl_dataset` (configs/datasets) into data_path / rl_config.val_data_path.
    vl_question: str = "colour"           # data/vl_task.py KINDS
    image_size: int = 56                  # pixels a side (56: 4 image tokens)
    num_val_prompts: int = 64             # held-out images, never trained on
    vl_dataset: str = "tiny_vl_shapes"
    # A warm start of the tiny actor before its conversion (models/warm_start.py): echo, the
    # copy of a tool's answer learnt over random text (the skill a real base arrives with);
    # recall, one character of a text given back after "=" (the LoRA recipe's base).
    warm_start: Optional[Literal["echo", "recall"]] = None
    warm_start_steps: int = 1000
    seed: int = 0


@dataclass(frozen=True)
class AgentConfig:
    """Multi-turn episodes (docs/guides/agentic.md): with tools, the model calls a tool, its
    answer is inserted (attended, never trained), the model goes on; with an environment,
    the environment answers each model turn with an observation or ends the episode. Neither:
    one turn."""

    tools: list[str] = field(default_factory=list)   # registry names or module:function
    format: str = "qwen25"            # the chat template's tool layout (names.TOOL_FORMATS)
    max_turns: int = 4                # model turns per episode (the last answers)
    tool_timeout_s: float = 10.0      # per call; a late call answers "timeout after N s"
    max_tool_response_tokens: int = 256   # a tool's answer is cut there, with a marker
    sandbox: Literal["strict", "best_effort"] = "strict"   # the python tool's layers
    tool_workers: int = 1             # processes of the tool pool
    traces_per_step: int = 4          # episodes kept as text in the run folder each step
    search_corpus: Optional[str] = None   # jsonl of {"id", "text"} the search tool ranks
    call_bonus: float = 0.0           # added to the score of an episode a tool answered
    environment: Optional[str] = None     # module:Class (or file.py:Class), rollout/environment
    reward: Literal["verifiers", "environment", "sum"] = "verifiers"   # what scores an episode

    @property
    def multi_turn(self) -> bool:
        return bool(self.tools) or self.environment is not None


@dataclass(frozen=True)
class RunConfig:
    """A validated recipe. Roles are already merged with megatron_training."""

    model: ModelSpec
    megatron_training: MegatronConfig
    actor_config: MegatronConfig
    ref_config: MegatronConfig
    reward_config: MegatronConfig
    rl_config: RLConfig
    generate_config: GenerateConfig
    models: dict[str, ModelSpec]      # role -> its architecture (reward: scalar head)
    run_dir: Optional[str] = None
    dry_run: bool = False
    prepare: PrepareConfig = field(default_factory=PrepareConfig)
    recipe: Optional[str] = None      # name it was composed from, when known
    agent_config: AgentConfig = field(default_factory=AgentConfig)
    teacher_config: Optional[MegatronConfig] = None   # null: megatron_training's

    @property
    def active_roles(self) -> list[str]:
        """Roles that get workers: the reference only with a KL term, reward only with
        rl_config.reward_model, the teacher only with rl_config.distill_loss."""
        roles = ["actor"]
        if self.rl_config.uses_reference:
            roles.append("ref")
        if self.rl_config.reward_model:
            roles.append("reward")
        if self.rl_config.uses_teacher:
            roles.append("teacher")
        return roles

    @property
    def pixel_dtype(self) -> str:
        """What a VL batch's pixel values travel in: bf16 when every active role's tower
        computes in bf16 (half the bytes), else fp32."""
        dtypes = {self.role(r).params_dtype for r in self.active_roles}
        return "bfloat16" if dtypes == {"bfloat16"} else "float32"

    def role(self, name: str) -> MegatronConfig:
        return {"actor": self.actor_config, "ref": self.ref_config,
                "reward": self.reward_config,
                "teacher": self.teacher_config or self.megatron_training}[name]

    def resource(self, name: str) -> Optional[ResourceSpec]:
        """A role's devices; a colocated reference without its own entry shares the actor's."""
        rl = self.rl_config
        if name == "actor":
            return rl.actor_resource
        if name == "ref":
            if rl.reference_resource is None and (rl.colocate_actor_ref or rl.colocates_all):
                return rl.actor_resource
            return rl.reference_resource
        if name == "teacher":
            if rl.teacher_resource is None and (rl.colocate_actor_teacher or rl.colocates_all):
                return rl.actor_resource
            return rl.teacher_resource
        if rl.reward_resource is None and rl.colocates_all:
            return rl.actor_resource
        return rl.reward_resource

    @property
    def samples_per_step(self) -> int:
        return self.megatron_training.global_batch_size * self.rl_config.n_samples_per_prompt
