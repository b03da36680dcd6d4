"""Rank body of tests/weight_sync/test_vl_sync.py: one Megatron Qwen2.5-VL rank syncing into
vLLM engines (child processes) through the real sync path (Megatron shards -> bucket ->
engine), every case in one world so the engines start once.

Engines: TP1 with prefix caching on, TP1 with it off, TP2 (vLLM's mp executor), and a
fresh TP1 engine started on the perturbed checkpoint (the reference).
"""

import math
import os
import time

import torch

from mindrl.errors import WeightSyncError

PERTURBED = "visual.merger.mlp.2.weight"   # the merger's last weight, x 1.1 in the reference
SWAPPED = "visual.blocks.0.attn.qkv.weight"
SMALL_BUCKET_MB = 0.1     # 26k fp32 elements: less than one vision gate_proj (32k)


def _megatron(model_dir):
    """This rank's Megatron Qwen2.5-VL (TP1) holding the checkpoint, and its full spec."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.models.families.qwen25_vl import build_qwen25_vl_model
    from mindrl.models.hf_config import spec_from_hf_config
    from support.mcore_load import load_hf_state_dict

    hf = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir)
    parallel = Parallelism()
    initialize_parallel(parallel)
    model = build_qwen25_vl_model(hf.config, parallel)
    load_hf_state_dict(model, hf.state_dict())
    return model, spec_from_hf_config(hf.config, "tiny-vl")


def _generate(engine, request):
    out = engine.generate([request["ids"]], n=1, images=[request["images"]],
                          mm_processor_kwargs=request["mm_processor_kwargs"], seed=3)
    return out.response_token_ids[0], torch.tensor(out.log_probs[0])


def _diff(a, b):
    """Max |log-prob difference| (inf when the sampled tokens differ in number)."""
    if a[1].shape != b[1].shape:
        return math.inf
    return float((a[1] - b[1]).abs().max())


def _sync(model, spec, engine, bucket_mb=SMALL_BUCKET_MB, collective=False, verify=True):
    """One real sync of the model's current weights (shm bucket, or the collective path:
    full tensors handed to `load_weights`)."""
    from mindrl.weight_sync.resharder import Resharder

    if collective:
        os.environ["MINDRL_RESHARD_SHM"] = "0"
    try:
        resharder = Resharder(model, spec, target=engine, bucket_mb=bucket_mb)
        stats = resharder.sync(verify=verify)
        resharder.close()
    finally:
        os.environ.pop("MINDRL_RESHARD_SHM", None)
    return stats


class _SwapsQK:
    """The real engine, handed buckets whose first vision block's qkv has q and k swapped
    (a loader or transport bug the mapping-based expected fingerprint cannot share)."""

    def __init__(self, engine, hidden):
        self.engine, self.hidden = engine, hidden

    def submit_load_from_bucket(self, path, numel, dtype, entries):
        for name, offset, shape in entries:
            if name == SWAPPED:
                flat = torch.from_file(path, shared=True, size=numel, dtype=dtype)
                qkv = flat[offset:offset + math.prod(shape)].view(shape)
                h = self.hidden
                q = qkv[:h].clone()
                qkv[:h] = qkv[h:2 * h]
                qkv[h:2 * h] = q
        return self.engine.submit_load_from_bucket(path, numel, dtype, entries)

    def __getattr__(self, attr):
        return getattr(self.engine, attr)


def vl_syncs(rank, world, model_dir, perturbed_dir, request, tp1_config, tp2_config):
    from megatron.core import parallel_state as ps

    from mindrl.engines.vllm_process import VLLMEngineProcess

    out = {"seconds": {}}
    t0 = time.perf_counter()
    model, spec = _megatron(model_dir)
    params = dict(model.named_parameters())
    base = {n: p.detach().clone() for n, p in params.items()}
    engines = {}
    try:
        engines["prefix_on"] = VLLMEngineProcess(model_dir, tp1_config, seed=0,
                                                 enable_prefix_caching=True)
        engines["prefix_off"] = VLLMEngineProcess(model_dir, tp1_config, seed=0,
                                                  enable_prefix_caching=False,
                                                  mm_processor_cache_gb=0)
        fresh = VLLMEngineProcess(perturbed_dir, tp1_config, seed=0)
        out["seconds"]["start_tp1"] = time.perf_counter() - t0
        reference = _generate(fresh, request)
        fresh.close()

        # (a) same image before and after syncs of a perturbed / restored tower, every load
        # path: shm bucket -> load_weights_from_bucket, collective -> load_weights.
        with torch.no_grad():
            perturbed = base[PERTURBED] * 1.1
        steps = [("shm", perturbed), ("collective", base[PERTURBED]),
                 ("collective", perturbed), ("shm", base[PERTURBED])]
        for label, engine in engines.items():
            before = _generate(engine, request)
            again = _generate(engine, request)         # the image's features now cached
            rows = {"repeat": _diff(again, before)}
            for index, (path, weight) in enumerate(steps):
                with torch.no_grad():
                    params[PERTURBED].copy_(weight)
                _sync(model, spec, engine, collective=path == "collective")
                now = _generate(engine, request)
                target = reference if weight is perturbed else before
                rows[f"{index}:{path}"] = {
                    "to_perturbed": weight is perturbed,
                    "vs_target": _diff(now, target), "same_tokens": now[0] == target[0],
                    "vs_other": _diff(now, before if weight is perturbed else reference)}
            out[label] = rows
        out["reference_vs_base"] = _diff(reference, before)

        # (b) three verified syncs in a row, buckets smaller than one vision MLP tensor, at
        # infer TP1 and TP2; the weights move before each.
        t1 = time.perf_counter()
        engines["tp2"] = VLLMEngineProcess(model_dir, tp2_config, seed=0)
        out["seconds"]["start_tp2"] = time.perf_counter() - t1
        out["tp2_qkv_shape"] = tuple(engines["tp2"].hf_shapes[SWAPPED])
        gen = torch.Generator().manual_seed(0)
        rounds = []
        for step in range(3):
            with torch.no_grad():
                for p in params.values():
                    p.add_(torch.randn(p.shape, generator=gen) * 1e-3 * p.std())
            stats = {}
            for label in ("prefix_on", "tp2"):
                s = _sync(model, spec, engines[label], verify=True)
                stats[label] = {"buckets": s.buckets, "tensors": s.tensors,
                                "verify_s": s.verify_seconds, "seconds": s.seconds}
            rounds.append(stats)
        out["rounds"] = rounds
        out["tp1_vs_tp2"] = _diff(_generate(engines["prefix_on"], request),
                                  _generate(engines["tp2"], request))

        # (c) q and k swapped in the first vision block: the verified sync names it.
        hidden = spec.vision.hidden_size
        out["swapped"] = {}
        for label in ("prefix_on", "tp2"):
            try:
                _sync(model, spec, _SwapsQK(engines[label], hidden), verify=True)
                out["swapped"][label] = None
            except WeightSyncError as exc:
                out["swapped"][label] = str(exc)
        out["seconds"]["total"] = time.perf_counter() - t0
    finally:
        for engine in engines.values():
            engine.close()
        ps.destroy_model_parallel()
    return out
