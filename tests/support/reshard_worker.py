"""Rank bodies for the resharding tests (run under mindrl.distributed.spawn_local).

Rank 0 hosts one vLLM (in a child process: a torch.distributed rank cannot host it in-process)
for the whole run; every Megatron layout of the run syncs into that same engine.
"""

import dataclasses
import os
import time

import torch

from mindrl.ckpt import mapping, registry
from mindrl.ckpt.fingerprint import checkpoint_fingerprint
from mindrl.data.batch import Batch
from mindrl.engines.megatron_engine import LossConfig, MegatronEngine, OptimConfig
from mindrl.engines.vllm_process import VLLMEngineProcess
from mindrl.errors import WeightSyncError
from mindrl.models.builder import Parallelism, initialize_parallel
from mindrl.weight_sync.resharder import Resharder

N_SAMPLES = 4


def _engine(spec, full, tp, pp, lr=None):
    """A Megatron engine at TP/PP holding a full Megatron state dict (optimizer with lr)."""
    from megatron.core import parallel_state as ps

    # Megatron's MoE layer needs sequence parallelism at TP > 1.
    parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                           sequence_parallel=spec.is_moe and tp > 1)
    initialize_parallel(parallel)
    optim = OptimConfig(lr=lr, clip_grad=0.0) if lr else None
    engine = MegatronEngine(spec, parallel, micro_batch_size=2, optim=optim,
                            loss=LossConfig(temperature=1.0))
    local = mapping.stage_state_dict(full, spec, ps.get_tensor_model_parallel_rank(), tp,
                                     ps.get_pipeline_model_parallel_rank(), pp)
    engine.module.load_state_dict(local, strict=False)
    if optim:
        engine.optimizer.reload_model_params()
    return engine


def _broadcast(obj):
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def _rollout(vllm, prompts, seed):
    """vLLM samples on rank 0, the padded batch on every rank."""
    batch = None
    if vllm is not None:
        batch = vllm.generate(prompts, n=N_SAMPLES, seed=seed).to_batch(pad_id=0)
    return _broadcast(batch)


def _max_diff(a, b, mask):
    return float(((a - b).abs() * mask).max())


def sync_layouts(rank, world, spec, vllm_dir, layout_dirs, fulls, layouts, prompts, gen_cfg):
    """Per layout: sync fresh weights, compare logprobs, train one step, sync, compare; then the
    last layout again into a vLLM whose weights the ranks write directly (shared weights).

    fulls[i]: full Megatron state dict of layout_dirs[i] at layouts[i]'s TP (built by the
    caller: mapping's vocab padding trips the CPU compat layer inside a rank).
    """
    vllm = VLLMEngineProcess(vllm_dir, gen_cfg) if rank == 0 else None
    shared = (VLLMEngineProcess(vllm_dir, gen_cfg, plain_cpu_linears=True, share_weights=True)
              if rank == 0 else None)
    out = {"layouts": {}, "modes": (vllm.load_mode, shared.load_mode) if rank == 0 else None}
    try:
        for i, (tp, pp) in enumerate(layouts):
            out["layouts"][(tp, pp)] = _sync_and_train(spec, vllm, layout_dirs[i], fulls[i],
                                                       tp, pp, prompts, i)
        out["shared"] = _sync_and_train(spec, shared, layout_dirs[-1], fulls[-1], *layouts[-1],
                                        prompts, len(layouts))
        # The transport for engines the ranks cannot reach through host memory (GPUs, other
        # nodes): full tensors gathered on the host over the collective backend.
        os.environ["MINDRL_RESHARD_SHM"] = "0"
        try:
            out["collective"] = _sync_and_train(spec, vllm, layout_dirs[-1], fulls[-1],
                                                *layouts[-1], prompts, len(layouts) + 1)
        finally:
            del os.environ["MINDRL_RESHARD_SHM"]
        out["deferred"] = _deferred_check(spec, vllm, fulls[-1], layouts[-1])
        out["shared_failure"] = _failed_direct_write(spec, shared, fulls[-1], layouts[-1])
        out["wrong_entries"] = _wrong_mapping_entries(spec, layout_dirs[-1], fulls[-1],
                                                      layouts[-1], vllm)
        out["bucket_failure"] = _failed_bucket_load(spec, vllm, fulls[-1], layouts[-1])
    finally:
        for engine in (vllm, shared):
            if engine is not None:
                engine.close()
    return out if rank == 0 else None


def _sync_and_train(spec, vllm, layout_dir, full, tp, pp, prompts, i):
    from megatron.core import parallel_state as ps

    engine = _engine(spec, full, tp, pp, lr=1e-2)
    resharder = Resharder(engine.model, spec, target=vllm, bucket_mb=0.1)
    res = {"sync": resharder.sync(verify=True)}
    if vllm is not None:   # mapping-free check: vLLM now equals the layout's HF dir
        vllm.check_fingerprint(checkpoint_fingerprint(layout_dir, vllm.dtype))

    # (b) vLLM's sampled-token logprobs == Megatron's on the same sequences
    batch = _rollout(vllm, prompts, seed=100 + i)
    mask = batch["response_mask"].float()
    old = engine.compute_log_probs(Batch.of(**batch))["log_probs"]
    res["diff_before"] = _max_diff(batch["rollout_log_probs"], old, mask)

    # (c) one large-lr step, sync: vLLM follows the new weights
    g = torch.Generator().manual_seed(i)
    adv = torch.randn(batch["response_ids"].shape[0], 1, generator=g).sign()
    engine.update(Batch.of(**batch, advantages=adv.expand_as(mask) * mask),
                  mini_batch_size=batch["response_ids"].shape[0])
    new = engine.compute_log_probs(Batch.of(**batch))["log_probs"]
    res["sync_after_update"] = resharder.sync(verify=True)
    if vllm is not None:
        p_len = batch["prompt_mask"].sum(1)
        prompts_b = [batch["prompt_ids"][b, -int(p_len[b]):].tolist()
                     for b in range(len(p_len))]
        resp_b = [batch["response_ids"][b, :int(mask[b].sum())].tolist()
                  for b in range(len(p_len))]
        scored = vllm.score(prompts_b, resp_b)
        rescored = torch.zeros_like(old)
        for b, lps in enumerate(scored):
            rescored[b, :len(lps)] = torch.tensor(lps)
        res["diff_rescored_vs_new"] = _max_diff(rescored, new, mask)
        res["diff_rescored_vs_old"] = _max_diff(rescored, old, mask)
    res["diff_new_vs_old"] = _max_diff(new, old, mask)
    batch2 = _rollout(vllm, prompts, seed=200 + i)
    new2 = engine.compute_log_probs(Batch.of(**batch2))["log_probs"]
    res["diff_after"] = _max_diff(batch2["rollout_log_probs"], new2,
                                  batch2["response_mask"].float())
    res["tokens"] = int(mask.sum())
    ps.destroy_model_parallel()
    return res


def _failed_direct_write(spec, shared, full, layout):
    """A rank that cannot write its shard (a wrong place for one tensor): every rank raises
    naming it, and vLLM, half-written, refuses to generate. Breaks `shared` for good."""
    engine = _engine(spec, full, *layout)
    name = "model.layers.1.mlp.down_proj.weight"      # held by the last stage only
    if shared is not None:
        places = dict(shared.shared_weights.places)
        offset, shape = places[name]
        places[name] = (offset, (shape[0] + 1, shape[1]))
        shared.shared_weights = dataclasses.replace(shared.shared_weights, places=places)
    return _failing_sync(engine, spec, shared, shared)


class _DefersCheck:
    """The real engine whose check is submitted and waited for later (EngineFanout's
    submit_check); `alter` names a tensor whose expected digest is changed, as when an engine
    holds other weights than were sent."""

    def __init__(self, engine, alter=None):
        self.engine, self.alter = engine, alter

    def submit_check(self, expected, strict=True):
        expected = dict(expected)
        if self.alter is not None:
            expected[self.alter] = expected[self.alter] + 1.0
        return lambda: self.engine.check_fingerprint(expected, strict)

    def __getattr__(self, attr):
        return getattr(self.engine, attr)


def _deferred_check(spec, vllm, full, layout):
    """A verified sync that defers its check returns with the verdict pending; `settle`
    passes for the weights sent and raises, naming the tensor, where the engine differs;
    settled once, it is gone (the next settle waits for nothing)."""
    from megatron.core import parallel_state as ps

    engine = _engine(spec, full, *layout)
    name, out = "model.layers.0.self_attn.v_proj.weight", {}
    honest = Resharder(engine.model, spec,
                       target=_DefersCheck(vllm) if vllm is not None else None)
    honest.sync(verify=True, defer_check=True)
    out["pending"] = honest._verdict is not None
    honest.settle()
    wrong = Resharder(engine.model, spec,
                      target=_DefersCheck(vllm, name) if vllm is not None else None)
    wrong.sync(verify=True, defer_check=True)          # returns: the verdict is pending
    try:
        wrong.settle()
    except WeightSyncError as exc:
        out["error"] = str(exc)
    wrong.settle()
    ps.destroy_model_parallel()
    return out


class _DropsOneTensor:
    """The real engine, handed buckets without one tensor: vLLM refuses the half module."""

    def __init__(self, engine, name):
        self.engine, self.name = engine, name

    def submit_load_from_bucket(self, path, numel, dtype, entries):
        kept = [e for e in entries if e[0] != self.name]
        return self.engine.submit_load_from_bucket(path, numel, dtype, kept)

    def __getattr__(self, attr):
        return getattr(self.engine, attr)


def _failed_bucket_load(spec, vllm, full, layout):
    """A load that fails inside vLLM while the ranks fill the next bucket: every rank raises,
    the host naming the tensor, and vLLM refuses to generate. Breaks `vllm` for good."""
    engine = _engine(spec, full, *layout)
    name = "model.layers.0.self_attn.v_proj.weight"
    target = _DropsOneTensor(vllm, name) if vllm is not None else None
    return _failing_sync(engine, spec, target, vllm, bucket_mb=0.1)


def _failing_sync(engine, spec, target, vllm, **resharder_kw):
    """{"error": what the sync raised, "after": what generating on vLLM then raised}."""
    from megatron.core import parallel_state as ps

    result = {}
    try:
        Resharder(engine.model, spec, target=target, **resharder_kw).sync()
    except WeightSyncError as exc:
        result["error"] = str(exc)
    if vllm is not None:
        try:
            vllm.generate([[5, 6]], n=1)
        except WeightSyncError as exc:
            result["after"] = str(exc)
    ps.destroy_model_parallel()
    return result


def _swap_parts(fuse, first, second):
    """A mapping table whose `fuse` rules list two HF parts the wrong way round."""
    original = registry.mapping_of("qwen2")

    def table(spec):
        rules = []
        for rule in original.layer_rules(spec):
            if rule.fuse == fuse:
                hf = list(rule.hf)
                hf[first], hf[second] = hf[second], hf[first]
                rule = dataclasses.replace(rule, hf=tuple(hf))
            rules.append(rule)
        return rules

    return original, dataclasses.replace(original, layer_rules=table)


def _wrong_mapping_entries(spec, hf_dir, full, layout, vllm):
    """(d) Megatron holds the right weights; a wrong table entry is used only for the sync.

    The sync itself verifies (vLLM holds what was sent), so only the mapping-free reference
    (the HF checkpoint Megatron was loaded from) can catch it.
    """
    from megatron.core import parallel_state as ps

    tp, pp = layout
    engine = _engine(spec, full, tp, pp)
    reference = checkpoint_fingerprint(hf_dir, vllm.dtype) if vllm is not None else None
    messages = {}
    for label, (fuse, a, b) in {"gate<->up": (mapping.FUSE_GATE_UP, 0, 1),
                                "k<->v": (mapping.FUSE_QKV, 1, 2)}.items():
        original, wrong = _swap_parts(fuse, a, b)
        registry.replace_mapping(wrong)
        try:
            Resharder(engine.model, spec, target=vllm).sync(verify=True)
        finally:
            registry.replace_mapping(original)
        if vllm is not None:
            t0 = time.perf_counter()
            try:
                vllm.check_fingerprint(reference)
                messages[label] = None
            except WeightSyncError as exc:
                messages[label] = str(exc)
            messages[label + " seconds"] = time.perf_counter() - t0
    # Repair: the right table, and the reference check passes again.
    Resharder(engine.model, spec, target=vllm).sync(verify=True)
    if vllm is not None:
        vllm.check_fingerprint(reference)
    ps.destroy_model_parallel()
    return messages


def sync_one_layout(rank, world, spec, vllm_dir, layout_dir, full, layout, prompts, gen_cfg):
    """One layout of `sync_layouts` alone (sync, log-probs, a step, sync again) into a vLLM on
    rank 0: the cheap check a new family's sync gets."""
    vllm = VLLMEngineProcess(vllm_dir, gen_cfg) if rank == 0 else None
    try:
        res = _sync_and_train(spec, vllm, layout_dir, full, *layout, prompts, 0)
    finally:
        if vllm is not None:
            vllm.close()
    return res if rank == 0 else None
