"""The device-bucket weight sync on one GPU: Megatron's weights into another process through
CUDA IPC handles, against a device-to-device copy of the same bytes in the same run.

    python bench/device/bench_device_ipc.py               # qwen25-0.5b shape, bf16
    python bench/device/bench_device_ipc.py --model qwen25-1.5b --syncs 5

One rank (TP1) builds the Megatron engine with random weights and a `Resharder` whose target
is bench/device/ipc_receiver.py's child process (HF tensors on the same device). The transport
must be `device_bucket`. The first and the last sync are verified (the receiver's fingerprints
against the actor's); between syncs every weight moves, so each verified sync proves new
bytes arrived. Figures: seconds and GB per sync, s/GB against `copy_` of one tensor of the
same bytes on the device, the buckets the receiver opened (one per buffer, whatever the number
of syncs), and the sender's device memory over the sync beyond its weights (bounded by the
buckets: two halves of bucket_mb). No vLLM here: the vLLM side of the transport (its workers'
`load_from_bucket` on a device buffer) is proven where vLLM runs. Needs CUDA; exits 2 elsewhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.results import add_results_argument, emit  # noqa: E402


def copy_seconds_per_gb(nbytes: int, reps: int = 10) -> float:
    """A device-to-device copy of `nbytes` (one tensor's copy_), median seconds per GB."""
    import torch

    src = torch.randn(nbytes // 2, device="cuda").to(torch.bfloat16)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times) / (nbytes / 1e9)


def largest_bucket_bytes(resharder, dtype) -> int:
    """The largest bucket the sync plans (a module is never split, so one larger than a
    bucket goes alone): what one bucket buffer grows to."""
    from mindrl.weight_sync.plan import plan_buckets

    transport = resharder.transport
    itemsize = dtype.itemsize
    return max(sum(u.numel for u in bucket) for bucket in
               plan_buckets(resharder.source.units, transport.bucket_numel)) * itemsize


def run_syncs(spec, dtype: str, bucket_mb: float, syncs: int) -> dict:
    """`syncs` syncs (first and last verified) into a receiver process; the figures."""
    import torch

    from bench.device.ipc_receiver import DeviceReceiverProcess
    from mindrl.engines.megatron_engine import MegatronEngine
    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.weight_sync.resharder import Resharder

    initialize_parallel(Parallelism())
    engine = MegatronEngine(spec, Parallelism(), params_dtype=dtype, micro_batch_size=1)
    receiver = DeviceReceiverProcess(getattr(torch, dtype), torch.cuda.current_device())
    out = {"model_dtype": dtype, "bucket_mb": bucket_mb}
    try:
        resharder = Resharder(engine.module, spec, target=receiver, bucket_mb=bucket_mb)
        out["transport"] = resharder.transport.name
        out["largest_bucket_bytes"] = largest_bucket_bytes(resharder, getattr(torch, dtype))
        times, nbytes = [], 0
        # cuBLAS takes its workspace (32 MiB on Hopper) from torch's allocator at the first
        # matrix product in the process (here the verification's): not the sync's memory.
        ones = torch.ones(8, 8, device=torch.cuda.current_device())
        ones @ ones
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        for index in range(syncs):
            if index:
                with torch.no_grad():       # every weight moves: a verified sync sees new bytes
                    for p in engine.module.parameters():
                        p.mul_(0.99)        # in place: no temporary in the memory figure
            verify = index in (0, syncs - 1)
            torch.cuda.synchronize()
            t = time.perf_counter()
            stats = resharder.sync(verify=verify)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t
            nbytes = stats.bytes
            if not verify:
                times.append(seconds)
            if index == 0:
                out["receiver_opens_after_first"] = receiver.stats()["opens"]
            out.setdefault("verified_syncs", 0)
            out["verified_syncs"] += int(verify)
        got = receiver.stats()
        out.update({
            "syncs": syncs, "sync_bytes": nbytes, "buckets_per_sync": stats.buckets,
            "sync_s_median": statistics.median(times) if times else None,
            "receiver_opens": got["opens"], "receiver_open_buckets": got["open_buckets"],
            "receiver_tensors": got["tensors"], "receiver_held_bytes": got["held_bytes"],
            "sender_peak_over_weights_bytes": torch.cuda.max_memory_allocated() - base,
            "sender_kept_bytes": torch.cuda.memory_allocated() - base,
            "bucket_bytes": int(bucket_mb * 2**20)})
        if times:
            out["sync_s_per_gb"] = out["sync_s_median"] / (nbytes / 1e9)
            out["copy_s_per_gb"] = copy_seconds_per_gb(nbytes)
            out["sync_over_copy"] = out["sync_s_per_gb"] / out["copy_s_per_gb"]
        resharder.close()
    finally:
        receiver.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen25-0.5b")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--bucket-mb", type=float, default=512.0)
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--json-out", type=Path, default=None)
    add_results_argument(ap)
    args = ap.parse_args(argv)

    import torch

    from mindrl import device
    from mindrl.config.model_spec import load_model_spec

    if not device.shares_device_buffers():
        print(f"no device IPC on {device.device_type()}: nothing to measure")
        return 2
    device.init_distributed(0, 1)
    spec = load_model_spec(args.model)
    out = {"bench": "device_ipc", "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "model": args.model}
    out.update(run_syncs(dataclasses.replace(spec), args.dtype, args.bucket_mb, args.syncs))
    print(f"{out['model']} {args.dtype}: {out['sync_bytes'] / 1e9:.2f} GB per sync in "
          f"{out['buckets_per_sync']} buckets via {out['transport']}: "
          f"{out['sync_s_median']:.3f} s ({out['sync_s_per_gb']:.4f} s/GB; a device copy "
          f"{out['copy_s_per_gb']:.5f} s/GB: {out['sync_over_copy']:.1f}x); receiver opened "
          f"{out['receiver_opens']} buffers over {out['syncs']} syncs; sender peak "
          f"{out['sender_peak_over_weights_bytes'] / 2**20:.0f} MiB over its weights "
          f"(bucket {args.bucket_mb:g} MiB)")
    emit(out, args.json_out, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
