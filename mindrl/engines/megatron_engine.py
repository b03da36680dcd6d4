"""The Megatron actor / reference / reward engine: logprobs, GRPO updates, reward-model
scores, offload, checkpoints. The engine runs the passes; the objective's maths (losses,
micro-batch weighting, metric reductions) is algorithms/objective.py.

One instance lives in each rank of a role (TP x PP x DP processes). Every rank of the role
receives the same step Batch (mindrl/data/batch.py: tensors and per-sample lists), each DP
rank takes its own samples of it on the host, and data/rows/ turns them into model inputs on the
device: a plan (by rows, or by a token budget balanced over the DP ranks), then padded rows or one
packed row per micro batch.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional

import torch

from mindrl import device
from mindrl.algorithms import objective
from mindrl.config.model_spec import ModelSpec
from mindrl.config.roles import LossConfig, MoETraining, OptimConfig, Parallelism
from mindrl.config.schema import LoraConfig
from mindrl.data import rows
from mindrl.data.batch import Batch
from mindrl.engines import vocab_parallel
from mindrl.engines.moe_passes import MoEPasses
from mindrl.models.builder import build_gpt_model
from mindrl.models.lora import LoraSpec, adapters_off, apply_lora
from mindrl.models.forward import run_schedule


def _in_batch_order(result: Dict[str, torch.Tensor], order: List[int]
                    ) -> Dict[str, torch.Tensor]:
    """Per-sample results gathered in `order` (sample indices: a plan rank by rank and micro
    batch by micro batch, or mini batch by mini batch) -> the batch's order."""
    if order == list(range(len(order))):
        return result
    index = torch.tensor(order)
    return {k: torch.empty_like(v).index_copy_(0, index.to(v.device), v)
            for k, v in result.items()}


def _plan_order(plan: rows.Plan) -> List[int]:
    return [i for rank in plan for micro in rank for i in micro]


class MegatronEngine:
    """A policy (or frozen reference) held in Megatron TP/PP shards on this rank."""

    def __init__(self, spec: ModelSpec, parallel: Parallelism, params_dtype: str = "float32",
                 micro_batch_size: int = 1, optim: Optional[OptimConfig] = None,
                 loss: Optional[LossConfig] = None, pad_id: int = 0, seed: int = 1234,
                 build_model: Optional[Callable] = None, packed: bool = False,
                 max_tokens_per_micro_batch: Optional[int] = None,
                 moe: Optional[MoETraining] = None, lora: Optional[LoraConfig] = None):
        """build_model(spec, parallel, params_dtype) -> this rank's stage: a model family's
        builder (mindrl/models/families/); default the text GPTModel. `spec` stays the
        language model's (vocabulary, head). `packed`: micro batches as packed rows of real
        tokens; `max_tokens_per_micro_batch`: micro batches by that many real tokens (packed
        only) instead of `micro_batch_size` samples. `moe`: a MoE model's RL settings (the
        default GPTModel builder takes its TransformerConfig values; routers frozen on
        request; per-step routing metrics, models/moe_routing.py). `lora`: adapters on the
        stage's linear layers (models/lora.py), the only parameters the optimizer holds."""
        if max_tokens_per_micro_batch is not None and not packed:
            raise ValueError("max_tokens_per_micro_batch needs packed sequences (padded rows of "
                             "varying counts would break the pipeline's fixed shapes)")
        from megatron.core import parallel_state as ps

        self.spec, self.parallel, self.pad_id = spec, parallel, pad_id
        self.params_dtype = params_dtype
        self.micro_batch_size = micro_batch_size
        self.packed, self.max_tokens = packed, max_tokens_per_micro_batch
        self.loss_cfg = loss or LossConfig()
        self.ps = ps
        self.moe = moe
        if build_model is not None:
            module = build_model(spec, parallel, params_dtype)
        else:
            module = build_gpt_model(spec, parallel, params_dtype,
                                     **(moe.transformer_config() if moe else {}))
        # A MoE model's routers: load, balancing loss, routing replay (engines/moe_passes.py).
        self.experts = (MoEPasses(module, spec, moe, parallel.sequence_parallel, ps)
                        if spec.is_moe else None)
        self.optimizer = self.scheduler = None
        if lora is not None:
            if optim is None:
                raise ValueError("LoRA adapters are the trained role's: a forward-only role "
                                 "takes none")
            apply_lora(module, LoraSpec(lora.rank, lora.alpha, lora.dropout,
                                        tuple(lora.target_modules)), seed)
        if optim is None:
            self.model = module
            for p in module.parameters():
                p.requires_grad_(False)
        else:
            self._setup_training(module, optim, params_dtype)
        self.iteration = 0

    # ------------------------------------------------------------------ setup

    def _setup_training(self, module, optim: OptimConfig, params_dtype: str) -> None:
        from megatron.core.distributed import (DistributedDataParallel,
                                               DistributedDataParallelConfig,
                                               finalize_model_grads)
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        config = module.config
        ddp_config = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False,
            use_distributed_optimizer=optim.use_distributed_optimizer)
        self.model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=module)
        opt_config = OptimizerConfig(
            optimizer="adam", lr=optim.lr, min_lr=optim.min_lr, weight_decay=optim.weight_decay,
            adam_beta1=optim.adam_beta1, adam_beta2=optim.adam_beta2, adam_eps=optim.adam_eps,
            clip_grad=optim.clip_grad, bf16=config.bf16, fp16=config.fp16,
            params_dtype=config.params_dtype,
            use_distributed_optimizer=optim.use_distributed_optimizer)
        self.optimizer = get_megatron_optimizer(opt_config, [self.model])
        warmup = int(optim.lr_warmup_fraction * optim.train_iters)
        self.scheduler = OptimizerParamScheduler(
            self.optimizer, init_lr=0.0 if warmup else optim.lr, max_lr=optim.lr,
            min_lr=optim.min_lr, lr_warmup_steps=warmup,
            lr_decay_steps=max(optim.train_iters, 1), lr_decay_style=optim.lr_decay_style,
            start_wd=optim.weight_decay, end_wd=optim.weight_decay, wd_incr_steps=1,
            wd_incr_style="constant")
        config.finalize_model_grads_func = finalize_model_grads
        config.no_sync_func = self.model.no_sync
        config.grad_scale_func = self.optimizer.scale_loss

    @property
    def module(self):
        """The GPTModel stage (unwrapped)."""
        return getattr(self.model, "module", self.model)

    # ------------------------------------------------------------------ data split

    def _plan(self, batch: Batch, micro_batch_size: int) -> rows.Plan:
        """[DP rank][micro batch] -> sample indices of `batch`, the same on every rank."""
        return rows.plan(batch, self.ps.get_data_parallel_world_size(), micro_batch_size,
                         self.max_tokens)

    def _micro_batches(self, batch: Batch, plan: rows.Plan):
        """This DP rank's micro batches on its device, and their sequence length."""
        tp = self.parallel.tensor_model_parallel_size if self.parallel.sequence_parallel else 1
        return rows.micro_batches(
            batch, plan[self.ps.get_data_parallel_rank()], device.current_device(),
            pad_id=self.pad_id, multiple_of=tp, packed=self.packed,
            common_length=self.ps.get_pipeline_model_parallel_world_size() > 1)

    def _token_stats(self, output: torch.Tensor, micro: dict, with_entropy: bool):
        """Response-aligned log-probs (and entropy) [mb, R] from vocab-parallel logits, computed
        at the response positions only, loss.logprob_chunk_tokens tokens at a time (one pass
        gives both; see vocab_parallel.response_token_stats for the memory bound)."""
        positions = micro["positions"]
        targets = rows.at_positions(
            rows.next_token_targets(micro["tokens"], self.pad_id), positions)
        real = micro.get("response_index")     # packed rows: the real response tokens only
        if real is None or output.shape[0] != 1 or real.numel() == positions.numel():
            logp, ent = vocab_parallel.response_token_stats(
                output, positions, targets, self.spec.vocab_size, self.loss_cfg.temperature,
                self.loss_cfg.logprob_chunk_tokens)
            return logp, ent if with_entropy else None
        logp, ent = vocab_parallel.response_token_stats(
            output, positions.reshape(1, -1)[:, real], targets.reshape(1, -1)[:, real],
            self.spec.vocab_size, self.loss_cfg.temperature, self.loss_cfg.logprob_chunk_tokens)
        # Back to [mb, R], 0 at the padding (masked out everywhere it is read).
        zeros = logp.new_zeros(positions.numel())
        logp = zeros.index_copy(0, real, logp[0]).view_as(positions)
        ent = zeros.index_copy(0, real, ent[0]).view_as(positions) if with_entropy else None
        return logp, ent

    # ------------------------------------------------------------------ passes

    def _run_schedule(self, micro_batches: List[dict], seq_length: int, forward_only: bool,
                      loss_fn, replay: Optional[str] = None):
        """`replay`: the batch field whose routes every router replays (models/route_replay.py)."""
        if replay is None:
            return run_schedule(self.model, micro_batches, seq_length, forward_only, loss_fn)
        if self.experts is None:
            raise ValueError(f"routing replay of {replay!r} needs a MoE model; {self.spec.name} "
                             f"is dense (set rl_config.router_replay: off)")
        self.experts.load_routes(micro_batches, replay)
        try:
            return run_schedule(self.model, micro_batches, seq_length, forward_only, loss_fn)
        finally:
            self.experts.stop_replay()

    def compute_log_probs(self, batch: Batch, micro_batch_size: Optional[int] = None,
                          with_entropy: bool = False,
                          like_update: Optional[tuple] = None, with_routes: bool = False,
                          replay: Optional[str] = None) -> Dict[str, torch.Tensor]:
        """log p(response_ids[:, t]) [B, R] for the whole batch, identical on every rank.

        with_routes: also "routes" [B, P + R, L, K], what the routers picked per sample
        (models/route_replay.py); replay: the batch field whose routes the routers replay.

        like_update (mini_batch_size, shuffle, seed): plan the pass as `update` plans its mini
        batches, so the old log-probs come from the very micro batches the first update
        recomputes (importance ratio 1 on an on-policy mini batch, to the last bit the
        kernels allow)."""
        self.model.eval()
        mbs = micro_batch_size or self.micro_batch_size
        parts = ([list(range(len(batch)))] if like_update is None
                 else rows.mini_batches(len(batch), *like_update))
        results = [self._log_probs_of(batch.select(p) if like_update else batch, mbs,
                                      with_entropy, with_routes, replay) for p in parts]
        merged = {k: torch.cat([r[k] for r in results]) for k in results[0]}
        return _in_batch_order(merged, [i for p in parts for i in p])

    def _log_probs_of(self, batch: Batch, micro_batch_size: int, with_entropy: bool,
                      with_routes: bool = False, replay: Optional[str] = None):
        plan = self._plan(batch, micro_batch_size)
        micro, seq_length = self._micro_batches(batch, plan)
        with_routes = with_routes and self.experts is not None

        def collect(output, m):
            logp, ent = self._token_stats(output, m, with_entropy)
            return {"log_probs": logp, **({"entropy": ent} if ent is not None else {}),
                    **({"routes": self.experts.recorded_routes(m)} if with_routes else {})}

        with torch.no_grad():
            outputs = self._run_schedule(micro, seq_length, True, collect, replay)
        local = sum(len(m) for m in plan[self.ps.get_data_parallel_rank()])
        shape = (local, batch["response_ids"].shape[1])
        keys = ["log_probs"] + (["entropy"] if with_entropy else [])
        shapes = {k: shape for k in keys}
        if with_routes:
            shapes["routes"] = self.experts.routes_shape(
                local, batch["prompt_ids"].shape[1] + shape[1])
        result = self._gather_dp(self._from_last_stage(outputs, shapes))
        return _in_batch_order(result, _plan_order(plan))

    def compute_scores(self, batch: Batch, micro_batch_size: Optional[int] = None
                       ) -> torch.Tensor:
        """Reward-model score of each sample [B] (prompt ++ response), identical on every rank.

        The scalar head's output at the sample's last real token (its prompt length + response
        length - 1, response_mask deciding the latter), where HF's ForSequenceClassification
        pools: at the last non-padding token. Any batch size works (validation sets are not
        multiples of micro batch x DP): the batch is padded with copies of its first sample.
        """
        if self.spec.head != "scalar":
            raise RuntimeError(f"compute_scores needs a reward model (head 'scalar'); model "
                               f"{self.spec.name} has head {self.spec.head!r}")
        self.model.eval()
        mbs = micro_batch_size or self.micro_batch_size
        n = len(batch)
        extra = -n % ((1 if self.max_tokens else mbs) * self.ps.get_data_parallel_world_size())
        padded = batch.select(list(range(n)) + [0] * extra)
        plan = self._plan(padded, mbs)
        micro, seq_length = self._micro_batches(padded, plan)

        def collect(output, m):   # output [mb, L, 1] or a packed [1, T, 1]: a score per token
            last = m["last_positions"].long().unsqueeze(1)
            return {"scores": rows.at_positions(output[..., 0].float(), last)[:, 0]}

        with torch.no_grad():
            outputs = self._run_schedule(micro, seq_length, True, collect)
        local = sum(len(m) for m in plan[self.ps.get_data_parallel_rank()])
        result = self._gather_dp(self._from_last_stage(outputs, {"scores": (local,)}))
        return _in_batch_order(result, _plan_order(plan))["scores"][:n]

    def _from_last_stage(self, outputs, shapes: Dict[str, tuple]) -> Dict[str, torch.Tensor]:
        """Broadcast the last pipeline stage's results ({key: shape}) to every stage of this
        pipeline."""
        result = {k: (torch.cat([o[k] for o in outputs]) if outputs else
                      torch.zeros(shape, dtype=torch.float32, device=device.current_device()))
                  for k, shape in shapes.items()}
        if self.ps.get_pipeline_model_parallel_world_size() > 1:
            src = self.ps.get_pipeline_model_parallel_last_rank()
            for k in result:
                result[k] = result[k].contiguous()
                torch.distributed.broadcast(result[k], src,
                                            group=self.ps.get_pipeline_model_parallel_group())
        return result

    def _gather_dp(self, result: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        size = self.ps.get_data_parallel_world_size()
        if size == 1:
            return result
        group = self.ps.get_data_parallel_group()
        out = {}
        for k, v in result.items():
            parts = [torch.empty_like(v) for _ in range(size)]
            torch.distributed.all_gather(parts, v.contiguous(), group=group)
            out[k] = torch.cat(parts)
        return out

    # ------------------------------------------------------------------ update

    def _policy_loss(self, output, micro, cfg: LossConfig, mb_weight: torch.Tensor,
                     num_micro: int):
        """The micro batch's loss and metric parts (algorithms/objective.py) on its log-probs
        and entropy (always computed: the entropy is reported even without a bonus)."""
        logp, ent = self._token_stats(output, micro, with_entropy=True)
        return objective.micro_batch_loss(logp, ent, micro, cfg, mb_weight, num_micro,
                                          self.ps.get_data_parallel_world_size())

    def update(self, batch: Batch, mini_batch_size: int, shuffle: bool = False,
               seed: int = 0, entropy_coeff: Optional[float] = None,
               replay: Optional[str] = None) -> Dict[str, float]:
        """One pass over the batch in mini batches (samples); one optimizer step per mini batch.

        Needs response_mask and loss_mask (objective.trained_tokens), advantages, and old_log_probs (absent: on-policy, ratio = 1) and
        ref_log_probs when the KL loss is on. `replay`: the batch field whose routes the
        routers replay (models/route_replay.py).
        """
        if self.optimizer is None:
            raise RuntimeError("this engine was built without an optimizer (reference role)")
        history: List[Dict[str, float]] = []
        clock = self._tower_clock()
        if clock is not None:
            clock.take()
        for samples in rows.mini_batches(len(batch), mini_batch_size, shuffle, seed):
            history.append(self._train_mini_batch(batch.select(samples), entropy_coeff, replay))
        out = objective.merge_mini_batches(history)
        replay_s = self.experts.take_replay_s() if self.experts is not None else 0.0
        if replay is not None:
            out["moe/route_replay_s"] = replay_s
        if clock is not None:
            out["actor/vision_tower_s"] = clock.take()
        return out

    def forward_backward(self, mini: Batch, entropy_coeff: Optional[float] = None,
                         replay: Optional[str] = None) -> list:
        """Gradients of the mini batch's loss into the grad buffers (no optimizer step).
        `entropy_coeff` replaces the configured one for this call (a scheduled coefficient)."""
        self.model.train()
        cfg = (self.loss_cfg if entropy_coeff is None
               else dataclasses.replace(self.loss_cfg, entropy_coeff=entropy_coeff))
        mb_weight = objective.mini_batch_weight(objective.trained_tokens(mini).float(),
                                                cfg.loss_agg_mode).to(device.current_device())
        micro, seq_length = self._micro_batches(mini, self._plan(mini, self.micro_batch_size))
        self._num_micro = len(micro)
        if self.experts is not None:
            self.experts.load_balance(micro, len(mini))
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        return self._run_schedule(
            micro, seq_length, False,
            lambda out, m: self._policy_loss(out, m, cfg, mb_weight, len(micro)), replay)

    def _train_mini_batch(self, mini: Batch, entropy_coeff: Optional[float],
                          replay: Optional[str] = None) -> Dict[str, float]:
        losses = self.forward_backward(mini, entropy_coeff, replay)
        ok, grad_norm, _ = self.optimizer.step()
        if ok:
            self.scheduler.step(increment=1)
        self.iteration += 1
        return self._reduce_metrics(losses, grad_norm)

    def _metric_groups(self) -> list:
        """Groups across which per-micro-batch metrics are spread (last stage only holds
        them; DP ranks hold disjoint samples)."""
        groups = []
        if self.ps.get_pipeline_model_parallel_world_size() > 1:
            groups.append(self.ps.get_pipeline_model_parallel_group())
        if self.ps.get_data_parallel_world_size() > 1:
            groups.append(self.ps.get_data_parallel_group())
        return groups

    def _reduce_metrics(self, losses: list, grad_norm) -> Dict[str, float]:
        """The mini batch's metrics: objective.METRICS from the micro batches' parts, summed
        (or maxed) over micro batches and ranks, and the optimizer's."""
        # On the device: the all-reduce below runs on nccl / hccl there.
        vec = objective.micro_batch_totals(losses or [], device.current_device())
        summed = len(objective.SUMMED_PARTS)
        for group in self._metric_groups():
            torch.distributed.all_reduce(vec[:summed], group=group)
            torch.distributed.all_reduce(vec[summed:], op=torch.distributed.ReduceOp.MAX,
                                         group=group)
        out = objective.mini_batch_metrics(vec.tolist())
        if self.experts is not None:
            out.update(self.experts.metrics(self._num_micro, self._metric_groups()))
        out["actor/grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
        out["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        return out

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, save_dir, iteration: int, extra: Optional[dict] = None,
                        save_optim: bool = True, save_rng: bool = True):
        """Collective over the role's ranks; atomic (see megatron_checkpoint). The recipe file
        records the model shape, micro batch and dtype, plus extra["recipe"] (the trainer's
        batch arithmetic), so a resume can name what changed (checkpoint_recipe)."""
        from mindrl.ckpt.training import checkpoint_recipe, megatron_checkpoint

        extra = extra or {}
        recipe = {**extra.get("recipe", {}), "model": checkpoint_recipe.model_recipe(self.spec),
                  "params_dtype": self.params_dtype, "micro_batch_size": self.micro_batch_size}
        return megatron_checkpoint.save(self.module, self.optimizer, self.scheduler, save_dir,
                                        iteration, {"engine_iteration": self.iteration, **extra},
                                        save_optim=save_optim, save_rng=save_rng, recipe=recipe,
                                        model_info=self._model_info())

    def _features(self):
        """What the model's registered family declares (vision tower, mrope, experts)."""
        from mindrl.models.families import model_family

        return model_family(self.module.family).features

    def _tower_clock(self):
        """A VL model's first stage times its vision tower; other models have no tower."""
        if self._features().multimodal and self.module.pre_process:
            return self.module.tower_clock
        return None

    def _model_info(self) -> str:
        """What the converter needs to read a training checkpoint: the language model's spec
        and, for a VL family, its HF config (vision tower and token ids), as converted ones."""
        from mindrl.ckpt.mcore_io import ModelInfo, vision_info

        if not self._features().multimodal:
            return ModelInfo(self.spec, self.params_dtype).to_json()
        hf_config = self.module.hf_config                       # a VL family's stage
        spec = dataclasses.replace(self.spec, vision=None, mrope_section=None)
        return ModelInfo(spec, self.params_dtype,
                         vision_info(self.module.family, hf_config.to_dict())).to_json()

    def load_checkpoint(self, ckpt_dir, load_optim: bool = True, load_rng: bool = True) -> dict:
        """At any TP/PP/DP (layout_change); meta["notes"] says what a layout change left
        fresh (the RNG state)."""
        from mindrl.ckpt.training import megatron_checkpoint

        meta = megatron_checkpoint.load(self.module, self.optimizer, self.scheduler, ckpt_dir,
                                        load_optim=load_optim, load_rng=load_rng)
        self.iteration = meta["extra"].get("engine_iteration", self.iteration)
        if self.optimizer is not None and not load_optim:
            self.optimizer.reload_model_params()
        return meta

    # ------------------------------------------------------------------ offload

    def _offload_groups(self) -> Dict[str, list]:
        from mindrl.engines.offload import optimizer_state_tensors

        params = [p for p in self.module.parameters()]
        for buf in getattr(self.model, "buffers", []):
            params.append(buf.param_data)
        grads = [getattr(p, "main_grad", None) for p in self.module.parameters()]
        grads += [buf.grad_data for buf in getattr(self.model, "buffers", [])]
        optim = optimizer_state_tensors(self.optimizer) if self.optimizer is not None else []
        # fp32 main params can be views of the params: keep each storage in one group only.
        taken = {t.untyped_storage().data_ptr() for t in params + grads if t is not None}
        optim = [t for t in optim if t.untyped_storage().data_ptr() not in taken]
        return {"param": params, "grad": grads, "optimizer": optim}

    def offload(self, param: bool = True, grad: bool = True, optimizer: bool = True) -> int:
        """Free the device memory of the chosen groups (host copies kept); bytes freed."""
        from mindrl.engines.offload import StorageOffloader

        if getattr(self, "_offloader", None) is not None and self._offloader.offloaded:
            raise RuntimeError("engine is already offloaded; call onload() first")
        self._offloader = StorageOffloader()
        groups = self._offload_groups()
        chosen = [t for name, flag in (("param", param), ("grad", grad), ("optimizer", optimizer))
                  if flag for t in groups[name]]
        freed = self._offloader.offload(chosen)
        device.empty_cache()
        return freed

    def onload(self) -> int:
        offloader = getattr(self, "_offloader", None)
        return offloader.onload() if offloader is not None else 0


class AdaptersOff:
    """A LoRA actor's reference: the actor's own engine with its adapters off for each pass
    (the base model, to the bit: B A is not added at all), so no second copy is held."""

    def __init__(self, engine: MegatronEngine):
        self.engine = engine

    def compute_log_probs(self, *args, **kwargs) -> Dict[str, torch.Tensor]:
        with adapters_off(self.engine.module):
            return self.engine.compute_log_probs(*args, **kwargs)
