"""What each recipe key means, keyed by its dotted name: the one place docs/config-reference.md
takes its "meaning" column from (`python -m mindrl.config.reference --write`).

Type and default come from mindrl/config/schema.py itself; a schema field without an entry here
fails tests/docs/test_config_reference.py, naming the key. Keys of megatron_training hold for
the role sections too (actor_config, ref_config, reward_config, teacher_config); a
ResourceSpec's keys are
described once, under rl_config.actor_resource.
"""

KEY_DOCS: dict[str, str] = {
    # --- top level -------------------------------------------------------------------------
    "run_dir": "the run directory: metrics, events, checkpoints, reports (the shipped "
               "recipes: `${mindrl.work_dir:}/runs/<recipe>`)",
    "dry_run": "print the plan (roles, devices, engines, nodes, batches, what a score is "
               "made of and what the update does, memory) and exit without starting "
               "anything (`+dry_run=true`)",

    # --- megatron_training (and every role section) ------------------------------------------
    "megatron_training.global_batch_size": "prompts per step (MindSpeed-RL's convention)",
    "megatron_training.seq_length": "prompt + response tokens per sample",
    "megatron_training.train_iters": "steps of the run",
    "megatron_training.model": "a configs/model name; null = the model composed in the "
                               "recipe's defaults list",
    "megatron_training.tokenizer_name_or_path": "an HF folder with the tokenizer (and for a "
                                                "VL model the processor)",
    "megatron_training.data_path": "a jsonl file, a directory or an indexed-dataset prefix "
                                   "written by cli/preprocess_data.py",
    "megatron_training.dataset_additional_keys": "row keys besides `labels` that reach the "
        "verifiers as keywords (lists and objects as Python values); a row without one stops "
        "the run at start-up, naming the row",
    "megatron_training.save_interval": "steps between checkpoints, and the last step; null "
                                       "(and no rl_config.save_freq) = no checkpoints",
    "megatron_training.seed": "seeds Megatron, the data order and vLLM's sampling: the same "
                              "seed on the same machine gives bit-identical metrics",
    "megatron_training.bf16": "Megatron mixed precision (bf16 weights and matmuls, fp32 main "
        "weights and gradients); refused before start where the device has no bf16 "
        "(docs/platforms.md#bf16)",
    "megatron_training.fp16": "Megatron fp16 mixed precision; exclusive with bf16",
    "megatron_training.use_distributed_optimizer": "Megatron's distributed optimizer: Adam "
                                                   "state sharded over data parallelism",
    "megatron_training.sequence_parallel": "activations split along the sequence over the TP "
                                           "group (MindRL's own norms); ignored at TP 1",
    "megatron_training.distributed_backend": "the collective backend; null = the device's "
                                             "(gloo on CPU, nccl, hccl)",
    "megatron_training.tensor_model_parallel_size": "training tensor parallelism",
    "megatron_training.pipeline_model_parallel_size": "training pipeline parallelism",
    "megatron_training.decoder_first_pipeline_num_layers": "uneven pipeline: the first "
    "stage's own layer count, the stages between split the rest evenly (Megatron-LM's key; "
    "for a layer count PP does not divide, e.g. Qwen3-235B's 94 over 16); null = even",
    "megatron_training.decoder_last_pipeline_num_layers": "uneven pipeline: the last stage's "
    "own layer count (with or without the first's); null = even",
    "megatron_training.micro_batch_size": "samples per micro batch (when no token budget is "
                                          "set)",
    "megatron_training.pack_sequences": "every Megatron pass runs on packed rows of real "
        "tokens, no padding (exact: docs/design.md#packed-sequences-and-token-budgets)",
    "megatron_training.max_tokens_per_micro_batch": "micro batches of at most this many real "
        "tokens, balanced over DP (needs pack_sequences; must hold max_prompt_length + "
        "max_tokens); null = micro_batch_size samples",
    "megatron_training.lr": "learning rate",
    "megatron_training.lr_decay_style": "the LR schedule after warm-up",
    "megatron_training.min_lr": "the floor of a decaying schedule",
    "megatron_training.weight_decay": "Adam's weight decay",
    "megatron_training.lr_warmup_fraction": "share of train_iters spent warming the LR up",
    "megatron_training.clip_grad": "gradient-norm clip",
    "megatron_training.adam_beta1": "Adam beta1",
    "megatron_training.adam_beta2": "Adam beta2",
    "megatron_training.adam_eps": "Adam epsilon",
    "megatron_training.load": "a converted Megatron checkpoint to start from (weights only, "
                              "like Megatron's release checkpoints); null = random init",
    "megatron_training.save": "where checkpoints go; null = <run_dir>/checkpoints",
    "megatron_training.no_load_optim": "a resume starts a fresh optimizer and LR schedule "
                                       "instead of restoring the saved one",
    "megatron_training.no_load_rng": "a resume starts fresh RNG streams",
    "megatron_training.no_save_optim": "checkpoints without the optimizer (resuming one then "
                                       "needs no_load_optim: true)",
    "megatron_training.no_save_rng": "checkpoints without RNG state (resuming one then needs "
                                     "no_load_rng: true)",
    "megatron_training.log_interval": "actor_config: a one-line console summary every N "
                                      "steps (metrics.jsonl and tensorboard get every step)",
    "megatron_training.cpu_threads": "torch threads per rank on the CPU device (1 per core)",
    "megatron_training.freeze_vision_tower": "a VL model's tower and merger get no gradients "
                                             "and stay out of the optimizer; refused on text",
    "megatron_training.lora": "LoRA adapters on the actor (docs/guides/lora.md; actor_config "
        "only): every base weight frozen, only the adapters in the optimizer; the reference "
        "is the actor's base with its adapters off (in the actor's processes: no second "
        "copy); null = full-parameter training",
    "megatron_training.lora.rank": "the adapters' rank (>= 1); peers advise >= 32",
    "megatron_training.lora.alpha": "the update B A is scaled by alpha / rank (> 0)",
    "megatron_training.lora.dropout": "dropout on the adapters' input, 0 <= p < 1",
    "megatron_training.lora.target_modules": "Megatron's names of the adapted linear layers "
        "of every block: linear_qkv, linear_proj (attention), linear_fc1, linear_fc2 (MLP); "
        "the MoE router and experts are refused",
    "megatron_training.lora.sync": "what the rollout engines get each step: merged (W + "
        "alpha / rank x B A, computed shard by shard on the actor's ranks, sent as full "
        "weights are); adapter (the adapters alone) is refused until it is built",
    "megatron_training.expert_model_parallel_size": "a MoE model's experts split over this "
        "many ranks: must divide the model's experts, and expert TP x EP must divide the "
        "stage's TP x DP (devices / PP; at the default expert TP = TP: EP divides DP). The "
        "weight sync sends each layer's experts over the EP group to the sending ranks, each "
        "expert once; proven over gloo on CPU (EP 2), written to Megatron's API elsewhere",
    "megatron_training.expert_tensor_parallel_size": "expert TP: each expert split over this "
        "many ranks (Megatron's expert_tensor_parallel_size); null = the role's TP (Megatron's "
        "default). 1 with TP > 1 keeps experts whole and spreads them over the TP x EP ranks "
        "(MindSpeed-RL's moe_tp_extend_ep: its EP e at TP t is EP e x t here). Must divide "
        "the TP; MoE only. On CPU (gloo) above 1 only at EP 1: at EP > 1 the alltoall "
        "dispatcher all-gathers uneven token counts over the expert-TP ranks, which gloo "
        "cannot",
    "megatron_training.moe_aux_loss_coeff": "the load-balancing loss's weight; 0 (off) by "
        "default, as RL peers train (it moves log-probs away from the rollout engine's); "
        "> 0 adds the loss moe_router_load_balancing_type names to the objective (summed over "
        "MoE layers) and logs actor/moe_aux_loss (its mean over layers, before the weight)",
    "megatron_training.moe_router_load_balancing_type": "seq_aux_loss (default): MindRL's "
        "per-sample switch loss, the mean over the mini batch's samples, exact under any "
        "micro-batch, token-budget, DP, SP or PP partition (padding left out); aux_loss: "
        "Megatron's, one per micro batch over whatever tokens it holds (its value and "
        "gradients change with the partition; MindSpeed-RL's); none",
    "megatron_training.moe_router_dtype": "null: the router computes in the params dtype, "
        "as vLLM's does (the same experts picked); fp32 / fp64 pick others for a few % of "
        "tokens in bf16",
    "megatron_training.moe_router_freeze": "the router's weights get no gradients and stay "
                                           "out of the optimizer (experts still train)",
    "megatron_training.moe_token_dispatcher_type": "how tokens reach experts: null (the "
        "dispatcher the role's layout needs: alltoall at expert parallelism > 1, allgather at "
        "1), allgather (equal token counts on every EP rank: refused at EP > 1) or alltoall",
    "megatron_training.moe_grouped_gemm": "true: each MoE layer's experts run as two grouped "
        "GEMMs (torch's, probed at model build in the params dtype; where it cannot run the "
        "build stops naming this key); false: one by one (Megatron's SequentialMLP); null: "
        "the device kind's measured default (CUDA grouped where it runs, CPU one by one: "
        "the same speed there). The same parameters and results either way",
    "megatron_training.stage": "MindSpeed-RL's algorithm key: `ray_grpo` only",
    "megatron_training.recompute_granularity": "null only: MindRL has no activation "
                                               "recomputation",
    "megatron_training.recompute_method": "null only (as recompute_granularity)",
    "megatron_training.recompute_num_layers": "null only (as recompute_granularity)",
    "megatron_training.no_pad_to_seq_lengths": "MindSpeed-RL's: true or null only (MindRL "
                                               "packs real tokens, never pads)",
    "megatron_training.finetune": "MindSpeed-RL's: true or null only (`load:` holds weights "
                                  "only; a run resumes from its own save directory)",
    "megatron_training.no_shuffle": "prompts in file order every epoch; false = a seeded "
                                    "shuffle per epoch (run-wide)",

    # --- rl_config -------------------------------------------------------------------------
    "rl_config.actor_resource": "the actor's devices: one of `num_npus`, `num_gpus`, "
                                "`num_cpus` (the ResourceSpec table)",
    "rl_config.actor_resource.num_npus": "Ascend NPUs",
    "rl_config.actor_resource.num_gpus": "GPUs",
    "rl_config.actor_resource.num_cpus": "logical CPU slots (several may share a core)",
    "rl_config.mini_batch_size": "prompts per policy update",
    "rl_config.adv_estimator": "group_norm, rloo, reinforce_plus_plus; `gae` is refused "
                               "until a critic role exists",
    "rl_config.kl_penalty": "the KL estimator: kl, mse, low_var_kl, abs",
    "rl_config.kl_coef": "weight of the KL term; 0 = none, and no reference role starts",
    "rl_config.use_kl_loss": "KL in the loss (GRPO) rather than in the reward",
    "rl_config.distill_loss": "on-policy distillation (docs/guides/distillation.md): "
        "`reverse_kl`, the per-token KL(student || teacher) on the student's samples, against "
        "the teacher role (teacher_config); null = off, no teacher starts; `forward_kl_topk` "
        "is refused (not built yet)",
    "rl_config.distill_estimator": "the distillation term's per-token estimator: k1, k2, k3 "
        "(the KL penalty's; their gradients differ: docs/guides/distillation.md#estimators)",
    "rl_config.distill_coef": "weight of the distillation term (>= 0)",
    "rl_config.distill_use_task_reward": "false: distillation alone (the policy-gradient "
        "term off; the score is still logged); true: GRPO's loss + distill_coef x the term",
    "rl_config.router_replay": "MoE routing replay (docs/guides/routing-replay.md): off; r2 "
                               "(the update replays the routes its old-log-prob pass recorded; "
                               "r2 turns that pass on); r3 (old log-probs, reference and update "
                               "replay the rollout engine's routes)",
    "rl_config.log_route_agreement": "MoE: log moe/route_agreement (the engine's routes vs the "
                                     "trainer's old-log-prob pass) without replaying them; "
                                     "the engines return routes and that pass runs every step "
                                     "(actor pipeline parallel size 1)",
    "rl_config.clip_ratio": "PPO clip range of the importance ratio",
    "rl_config.clip_ratio_low": "lower clip; null = clip_ratio",
    "rl_config.clip_ratio_high": "upper clip; null = clip_ratio",
    "rl_config.policy_loss": "the policy-gradient loss, a registered name "
                             "(mindrl.algorithms.POLICY_LOSSES): ppo_clip",
    "rl_config.clip_ratio_c": "dual-clip PPO: a negative advantage's loss is capped at "
                              "-A x clip_ratio_c (> 1, e.g. 3.0); null = no dual clip",
    "rl_config.entropy_coeff": "the entropy bonus at step 1 (logged as actor/entropy_coeff)",
    "rl_config.entropy_coeff_final": "the bonus after entropy_decay_steps (linear decay; set "
                                     "both or neither); null = entropy_coeff throughout",
    "rl_config.entropy_decay_steps": "steps from entropy_coeff to entropy_coeff_final",
    "rl_config.entropy_tokens": "which tokens the entropy bonus counts: all, or learning (the "
        "samples with a non-zero advantage only, so a step whose groups all score alike gets "
        "no bonus: alone, Adam would scale it to full-size steps and the policy unlearn)",
    "rl_config.skip_zero_advantage_updates": "true: a step in which every sample's advantage "
        "is 0 makes no update (actor/update_skipped 1; the weights, Adam's moments and the lr "
        "schedule stay as they were): its loss would be the KL and entropy terms alone, full-"
        "size steps under Adam that pull the policy back toward the reference; not with a "
        "distillation term",
    "rl_config.loss_agg_mode": "token-mean, seq-mean-token-mean, seq-mean-token-sum",
    "rl_config.rollout_is": "rollout correction, truncated importance sampling of old over "
        "rollout log-probs: off, token, sequence (docs/design.md#rollout-correction)",
    "rl_config.rollout_is_cap": "the importance weights' upper bound (> 1)",
    "rl_config.async_mode": "off: the synchronous loop; one_step / bounded: engines on "
        "devices of their own (generate_config.rollout_devices) generate the next batches "
        "while the actor trains (docs/guides/async.md); with staleness above 0 rollout_is off "
        "means token (the decoupled objective's behaviour weight)",
    "rl_config.max_staleness": "policy versions a trained sample may lag the actor (bounded; "
        "one_step means 1); generation is paced, never discarded",
    "rl_config.partial_rollout_tokens": "async only: generate in chunks of at most K new "
        "tokens per sample; a weight sync stops the chunk on the engines after their current "
        "step and the samples continue from their prefix on the new weights; each token "
        "keeps its version (token_policy_version); null = whole generations",
    "rl_config.inflight_sync": "async only: the weight sync does not wait for the batches in "
        "flight; each engine takes the new weights in between two decode steps from a second "
        "buffer; running requests keep their KV (keep_kv, PipelineRL's) or are prefilled "
        "again on the new weights (recompute_kv); each token keeps its version "
        "(token_policy_version); off = the sync waits for them",
    "rl_config.logprob_drift_threshold": "warn when rollout/logprob_diff_mean stays above "
                                         "this (steps on stale samples do not count); "
                                         "null = off",
    "rl_config.logprob_drift_steps": "consecutive steps above the threshold before the "
                                     "warning",
    "rl_config.logprob_chunk_tokens": "response tokens per fp32 log-softmax slab in the "
                                      "log-prob and entropy passes",
    "rl_config.n_samples_per_prompt": "samples generated per prompt (the group size)",
    "rl_config.epochs": "passes over a step's samples",
    "rl_config.shuffle_mini_batch": "shuffle samples before cutting mini batches",
    "rl_config.max_prompt_length": "longer prompts are set aside at start-up, counted in "
        "data/prompts_over_max_length and listed in <run_dir>/prompt_rejects.jsonl",
    "rl_config.blocking": "false: the old-logprob and reference passes run at once "
                          "(timing_s/log_prob_overlap)",
    "rl_config.gamma": "discount of per-token returns in (0, 1]; read by "
                       "reinforce_plus_plus only",
    "rl_config.lam": "GAE's lambda: read only by the refused `gae` (accepted for "
                     "MindSpeed-RL recipes)",
    "rl_config.rule_reward": "the verifiers score the rollouts",
    "rl_config.reward_model": "start the reward role (reward_config) to score them too "
                              "(docs/guides/reward-model.md)",
    "rl_config.reward_model_weight": "score = rule score + reward_model_weight x model score",
    "rl_config.verifier_function": "registered verifier names (docs/guides/add-a-verifier.md)",
    "rl_config.verifier_modules": "verifiers of your own: modules on the path or .py files "
                                  "(relative to the working directory) whose "
                                  "register_verifier names verifier_function may list; the "
                                  "check, the trainer and every verifier worker load them",
    "rl_config.verifier_weight": "one weight per verifier",
    "rl_config.verifier_parallel": "verifier worker processes",
    "rl_config.verifier_timeout": "seconds per sample; a hang or crash scores 0 and is "
                                  "counted",
    "rl_config.phase_timeout_s": "seconds any phase of a step may take; past it the run stops "
        "with a failure report, exit code 4 (docs/guides/failures.md)",
    "rl_config.reference_resource": "the reference role's devices (ResourceSpec)",
    "rl_config.reward_resource": "the reward role's devices (ResourceSpec)",
    "rl_config.teacher_resource": "the teacher role's devices (ResourceSpec); null with "
                                  "colocate_actor_teacher = the actor's",
    "rl_config.colocate_actor_teacher": "the teacher shares the actor's devices",
    "rl_config.teacher_in_actor_process": "a teacher colocated with the actor at the same "
                                          "devices, TP, PP and EP is built inside the actor's "
                                          "processes (as ref_in_actor_process); false: "
                                          "processes of its own",
    "rl_config.colocate_actor_ref": "the reference shares the actor's devices",
    "rl_config.colocate_all_models": "every role shares the actor's devices",
    "rl_config.ref_in_actor_process": "a reference colocated with the actor at the same "
                                      "devices, TP, PP and EP is built inside the actor's "
                                      "processes (one process per device; its passes run "
                                      "after the actor's); false: processes of its own",
    "rl_config.actor_forward_micro_batch_size": "rows per old-log-prob micro batch; null = "
        "micro_batch_size; refused beside max_tokens_per_micro_batch",
    "rl_config.ref_forward_micro_batch_size": "rows per reference micro batch (likewise)",
    "rl_config.use_tensorboard": "write tensorboard events",
    "rl_config.use_wandb": "log to wandb",
    "rl_config.wandb_project": "required with use_wandb",
    "rl_config.wandb_exp_name": "the wandb run name",
    "rl_config.wandb_mode": "online or offline",
    "rl_config.save_freq": "steps between checkpoints (and the last step); null = "
                           "megatron_training.save_interval",
    "rl_config.save_limit": "checkpoints kept; null = all",
    "rl_config.val_freq": "steps between validations (and the last step); null = none",
    "rl_config.dynamic_sampling": "DAPO: drop groups whose samples all score the same and "
                                  "generate again to fill the batch",
    "rl_config.max_gen_rounds": "generation rounds per step to fill the batch (>= 1)",
    "rl_config.overlong_buffer_len": "DAPO's soft overlong penalty: 0 up to max_tokens - this "
        "many response tokens, then linear to -overlong_penalty_factor at "
        "sampling_config.max_tokens, added to the rule score (rewards/overlong_penalty); 0 = "
        "off. MindSpeed-RL's name: overlong_buffer",
    "rl_config.overlong_penalty_factor": "the overlong penalty at max_tokens (>= 0). "
                                         "MindSpeed-RL's name: overlong_buffer_penalty_factor",
    "rl_config.val_data_path": "held-out prompt rows for validation",
    "rl_config.val_before_train": "validate before the first step",
    "rl_config.val_n_samples": "samples per validation prompt (>= 1)",
    "rl_config.val_temperature": "validation sampling temperature; 0 = greedy",
    "rl_config.val_max_prompts": "the first N validation rows; null = all",
    "rl_config.wandb_save_dir": "wandb's local files; null = the run directory",
    "rl_config.use_integrated_worker": "MindSpeed-RL's name: true = colocate_all_models (the "
                                       "reference then lives in the actor's processes)",
    "rl_config.guarantee_order": "accepted, no effect: rollouts always come back in prompt "
                                 "order",
    "rl_config.kl_ctrl_type": "`fixed` only: kl_coef is constant",
    "rl_config.log_max_throughput": "false only: perf/throughput is one figure",
    "rl_config.num_cpus_for_local_task": "null only: MindRL starts no Ray local task",
    "rl_config.token_level_loss": "MindSpeed-RL's: true = loss_agg_mode token-mean, false = "
                                  "seq-mean-token-mean; refused where loss_agg_mode differs",
    "rl_config.clip_higher_enable": "MindSpeed-RL's: false refuses clip_ratio_low/high other "
                                    "than clip_ratio",
    "rl_config.overlong_buffer_enable": "MindSpeed-RL's: must be true iff overlong_buffer "
                                        "(overlong_buffer_len) > 0",
    "rl_config.rollout_max_tokens": "MindSpeed-RL's: must equal sampling_config.max_tokens",
    "rl_config.filter_groups_metric": "MindSpeed-RL's: must be the one verifier of "
        "verifier_function (dynamic sampling compares scores); filter_groups_enable is "
        "MindSpeed-RL's name for dynamic_sampling",
    "rl_config.filter_groups_max_batches": "MindSpeed-RL's: -1 (unbounded there; "
                                           "max_gen_rounds bounds it here) or max_gen_rounds",
    "rl_config.filter_groups_train_batch_size": "MindSpeed-RL's: must equal "
                                                "megatron_training.global_batch_size",

    # --- generate_config -------------------------------------------------------------------
    "generate_config.infer_tensor_parallel_size": "vLLM tensor parallelism per engine (must "
                                                  "divide or be divided by training TP)",
    "generate_config.infer_pipeline_parallel_size": "vLLM pipeline parallelism per engine",
    "generate_config.infer_expert_parallel_size": "vLLM expert parallelism of a MoE model: 1 "
        "(experts split over infer TP) or the infer TP (experts whole over an engine's ranks; "
        "EP across engines is refused); not on CPU, whose vLLM MoE kernel crashes with EP",
    "generate_config.max_num_seqs": "vLLM's concurrent sequences",
    "generate_config.max_num_batched_tokens": "vLLM's tokens per scheduler step (on CPU "
                                              "raised to max_num_seqs x max_model_len)",
    "generate_config.max_model_len": "vLLM's longest prompt + response",
    "generate_config.dtype": "vLLM's dtype (on CPU fp32, or bf16 beside a bf16 actor: "
                             "docs/platforms.md#vllm-on-cpu)",
    "generate_config.gpu_memory_utilization": "share of device memory vLLM takes (GPU/NPU)",
    "generate_config.kv_cache_memory_bytes": "the KV cache's bytes; the CPU build sizes its "
                                             "cache by this, never by gpu_memory_utilization",
    "generate_config.block_size": "vLLM's KV block size; null = vLLM's",
    "generate_config.enforce_eager": "no graph capture (always true on CPU)",
    "generate_config.enable_prefix_caching": "vLLM's prefix cache (reset after every sync)",
    "generate_config.trust_remote_code": "let vLLM run a model folder's code",
    "generate_config.cpu_threads": "torch threads of the vLLM process (CPU device only)",
    "generate_config.offload_train_optimizer": "move the optimizer state to host memory "
                                               "while the engines generate",
    "generate_config.offload_train_grad": "move gradients to host memory while the engines "
                                          "generate",
    "generate_config.offload_train_param": "move parameters to host memory while the "
                                           "engines generate",
    "generate_config.sampling_config": "sampling (the table below); ranges checked before "
                                       "anything starts",
    "generate_config.sampling_config.max_tokens": "response tokens at most (>= 1)",
    "generate_config.sampling_config.logprobs": "log-probs returned per token (>= 0)",
    "generate_config.sampling_config.top_p": "nucleus sampling, 0 < top_p <= 1",
    "generate_config.sampling_config.top_k": "-1 (off) or >= 1",
    "generate_config.sampling_config.min_p": "0 <= min_p <= 1",
    "generate_config.sampling_config.temperature": ">= 0",
    "generate_config.sampling_config.detokenize": "vLLM also returns text",
    "generate_config.sampling_config.seed": "sampling seed (null = 0; the recipes set "
        "`${megatron_training.seed}`); seeds follow the prompt, not the engine",
    "generate_config.sampling_config.min_tokens": "no EOS before this many tokens "
                                                  "(<= max_tokens)",
    "generate_config.sampling_config.stop_token_ids": "ids that end a turn besides EOS (kept "
                                                      "in the response); a multi-turn "
                                                      "episode adds its format's call end",
    "generate_config.sampling_config.ignore_eos": "always generate max_tokens (benchmarks, "
                                                  "fixed lengths)",
    "generate_config.reshard_bucket_mb": "the Megatron -> vLLM weight-sync bucket",
    "generate_config.rollout_devices": "where the engines run: 0 = on the actor's devices "
        "(colocated); N = N devices of their own after every role's (on CPU, CPU slots), "
        "hosting N / (infer TP x PP) engines; checked against the cluster before start, and "
        "the plan (`+dry_run=true`) says which",
    "generate_config.cpu_weights": "CPU only: `packed` (oneDNN-packed linears, a sync "
        "repacks them) or `shared` (plain weights the ranks write directly; one engine of "
        "infer TP = PP = 1): docs/platforms.md#weights-into-vllm-on-cpu",
    "generate_config.verify_sync": "which syncs compare every engine's weight fingerprints "
        "with the actor's: every, first, off (docs/design.md#weight-paths)",
    "generate_config.sleep_level": "GPU/NPU: engines free device memory between rollouts (1: "
        "weights to host, KV dropped; 2: both dropped); nothing on CPU",
    "generate_config.torchair_graph": "false only: no torchair graph mode",
    "generate_config.enable_expert_parallel": "true: vLLM expert parallelism at EP = infer "
        "TP (as infer_expert_parallel_size at the infer TP); not on CPU",
    "generate_config.num_scheduler_steps": "1 only: vLLM V1 schedules one step at a time",

    # --- prepare ---------------------------------------------------------------------------
    "prepare.tiny_model": "a configs/model name (e.g. tiny-qwen2) made random-init when the "
                          "tokenizer folder is missing",
    "prepare.tokenizer": "char, char_tools (char with the four tool markers, for "
                         "agent_config.format: char) or qwen25 (built offline)",
    "prepare.task": "the generated task: arith (a+b=), max (max(a,b)= over digits), vl "
                    "(synthetic pictures) or arith_tool (a+b= with large operands, held-out "
                    "pairs drawn at random: the tool task)",
    "prepare.num_prompts": "generated training prompts",
    "prepare.max_operand": "arith operands run 0..max_operand (max: always digits 0..9)",
    "prepare.holdout_pairs": "operand pairs never trained on, written as the validation set; "
                             "0 = validate on the training table",
    "prepare.vl_question": "task vl: colour, shape, count, digit, compare, mixed",
    "prepare.image_size": "task vl: pixels a side",
    "prepare.num_val_prompts": "task vl: held-out pictures, never trained on",
    "prepare.vl_dataset": "task vl: the dataset recipe (configs/datasets) that preprocesses "
                          "them",
    "prepare.warm_start": "null (random init), echo or recall: before its conversion the tiny "
                          "actor learns a skill, never the task (models/warm_start.py): echo, "
                          "to repeat a tool's answer over random text (needs tokenizer "
                          "char_tools); recall, to give back one character of a random text "
                          "after '=' (tokenizer char or char_tools)",
    "prepare.warm_start_steps": "warm-start steps (64 documents each; 1000: ~45 s on 2 cores)",
    "prepare.seed": "seed of the generated model and data",

    # --- agent_config (docs/guides/agentic.md) ------------------------------------------------
    "agent_config.tools": "tools the model may call (a registry name, or module:function of "
                          "your own); empty: single-turn episodes",
    "agent_config.format": "the tool-call layout of the model's chat template: qwen25, qwen3 "
                           "or char (the tiny tokenizers)",
    "agent_config.max_turns": "model turns per episode, at least 1; the episode's whole "
                              "response (model and tool tokens) stays within "
                              "sampling_config.max_tokens",
    "agent_config.tool_timeout_s": "seconds a tool call may take; a late one answers "
                                   "'timeout after N s' and the episode goes on",
    "agent_config.max_tool_response_tokens": "a tool's answer is cut at this many tokens, "
                                             "with a marker",
    "agent_config.sandbox": "strict (refuse to start where a sandbox layer cannot be set up) "
                            "or best_effort (run with the layers that hold, said in every "
                            "trace)",
    "agent_config.tool_workers": "processes of the tool pool",
    "agent_config.call_bonus": "added to an episode's score when a tool answered at least "
                               "one of its calls without an error (read from the inserted "
                               "tokens, which the model cannot forge); 0: none",
    "agent_config.search_corpus": "a jsonl of {\"id\", \"text\"} documents the search tool "
                                  "ranks with BM25 (null: search answers an error)",
    "agent_config.traces_per_step": "episodes written as readable text to the run folder each "
                                    "step",
    "agent_config.environment": "module:Class (or path/to/file.py:Class) of an environment "
        "with reset(sample) and step(turn_text): it answers each model turn with the next "
        "user turn or ends the episode, and may reward it; exclusive with tools; null: none",
    "agent_config.reward": "what scores an environment's episode: verifiers (on its final "
        "answer; the environment's reward logged only), environment (its reward alone; the "
        "verifiers logged only) or sum",
}
