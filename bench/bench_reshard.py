"""Megatron -> vLLM weight sync (TP2 x PP2, fp32, CPU) against a memcpy of the same bytes by
the same number of writer processes.

    python bench/bench_reshard.py                       # qwen25-0.5b shape, 24 layers
    python bench/bench_reshard.py --layers 4            # smaller run, same tensor shapes
    python bench/bench_reshard.py --model tiny-qwen2    # smoke run
    python bench/bench_reshard.py --cpu-weights packed --bucket-mb 128,512
    python bench/bench_reshard.py --layers 4 --engines 1,2,4   # one sync into N engines

Both of vLLM's CPU weight modes by default, one spawn each (generate_config.cpu_weights):
packed (oneDNN packs, rebuilt from the bucket on every sync) and shared (plain weights in
/dev/shm that the ranks write directly). The JSON line's `ratio_to_floor` is the best mode's,
named by `cpu_weights`; `ratio_to_floor_<mode>` gives each.

Four ranks (spawn_local) build a random-init Megatron model at TP x PP; rank 0 hosts vLLM in
its child process (VLLMEngineProcess, random "dummy" weights, no checkpoint on disk) and is
the resharding host. Per bucket size: one cold sync, then warm syncs and verified syncs in
turn (fingerprints of everything sent, compared with vLLM's afterwards), the median of each;
`verify_overhead` = verified / unverified - 1 (goal <= 0.05: verification on by default);
the check's time is split into the actor's side (every rank's probe products of its own
shards, gathered as vectors) and vLLM's (digesting what it holds). Both sides read every
weight once, so against the shared mode's sync, itself one copy at the floor, the check
cannot come near 0.05; against the packed mode's sync it is a fraction.
The floor (`floor_s`, "memcpy, N writers"): the same number of bytes copied by as many writer
processes as the sync has, the TP x PP ranks (4 by default), each copying its 1/N share
between two warm private buffers in chunks of bucket/N, started together after a barrier and
timed on rank 0 until the last one is done (best of 3, measured in the same run). Both weight
modes write from those N ranks (shared: into vLLM's weights; packed: into the bucket), so
`ratio_to_floor` compares like with like. The single-thread memcpy of the same bytes through a
bucket-sized buffer on rank 0 (`memcpy_1thread_s`) is printed beside it, for reference only.
Peak extra memory: private memory (RSS less shared pages) sampled every 2 ms on rank 0 and in
the vLLM process, minus its value just before the sync, plus the shared bucket buffer on the
host.
Prints a table, then one JSON line.
"""

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common.results import add_results_argument, emit  # noqa: E402
MIB = 2 ** 20


class PeakRSS:
    """Samples the private memory (RSS minus file/shm-backed pages) of some processes in a
    thread; peak minus the value at start. Shared pages are left out because mapping vLLM's
    shared weights adds them to a writer's RSS without taking new memory; the sync's own
    shared buffer (the bucket) is added back from its stats."""

    def __init__(self, pids, interval=0.002):
        import psutil

        self.procs = [psutil.Process(p) for p in pids]
        self.interval, self.stop = interval, threading.Event()
        self.base = [self._private(p) for p in self.procs]
        self.peak = list(self.base)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            for i, p in enumerate(self.procs):
                self.peak[i] = max(self.peak[i], self._private(p))
            time.sleep(self.interval)

    @staticmethod
    def _private(proc) -> int:
        info = proc.memory_info()
        return info.rss - info.shared

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    @property
    def extra(self):
        return [p - b for p, b in zip(self.peak, self.base)]


def memcpy_seconds(total_bytes: int, bucket_bytes: int, repeats: int = 3) -> float:
    """Best of `repeats`: copy total_bytes in bucket-sized chunks between two warm buffers."""
    import torch

    n = max(1, bucket_bytes // 4)
    src, dst = torch.randn(n), torch.empty(n)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        left = total_bytes // 4
        start = time.perf_counter()
        while left > 0:
            k = min(n, left)
            dst[:k].copy_(src[:k])
            left -= k
        best = min(best, time.perf_counter() - start)
    return best


def parallel_memcpy_seconds(total_bytes: int, bucket_bytes: int, repeats: int = 3) -> float:
    """Best of `repeats`: every rank of the default group copies its 1/world share of
    total_bytes between two warm private buffers, in chunks of bucket_bytes/world, all starting
    at a barrier; the time is rank 0's, from the barrier until every rank is done (a second
    barrier). Every rank must call it with the same arguments; rank 0's figure is the floor."""
    import torch

    world = torch.distributed.get_world_size()
    n = max(1, bucket_bytes // world // 4)
    share = (total_bytes // 4 + world - 1) // world
    src, dst = torch.randn(n), torch.empty(n)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        torch.distributed.barrier()
        start = time.perf_counter()
        left = share
        while left > 0:
            k = min(n, left)
            dst[:k].copy_(src[:k])
            left -= k
        torch.distributed.barrier()
        best = min(best, time.perf_counter() - start)
    return best


def rank_body(rank, world, spec, hf_dir, tp, pp, bucket_mbs, warm_repeats,
              cpu_weights="packed", keep_buffer=False):
    import torch
    from megatron.core import parallel_state as ps

    from mindrl.config.schema import GenerateConfig, SamplingConfig
    from mindrl.engines.megatron_engine import MegatronEngine
    from mindrl.weight_sync.resharder import Resharder
    from mindrl.engines.vllm_process import VLLMEngineProcess
    from mindrl.models.builder import Parallelism, initialize_parallel

    parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    initialize_parallel(parallel)
    t0 = time.perf_counter()
    engine = MegatronEngine(spec, parallel)
    build_s = time.perf_counter() - t0
    vllm = None
    if rank == 0:
        cfg = GenerateConfig(max_num_seqs=4, max_model_len=256, kv_cache_memory_bytes=64 * MIB,
                             sampling_config=SamplingConfig(max_tokens=4))
        vllm = VLLMEngineProcess(hf_dir, cfg, load_format="dummy",
                                 plain_cpu_linears=cpu_weights != "packed",
                                 share_weights=cpu_weights == "shared")
    torch.distributed.barrier()
    results = {"build_s": build_s, "runs": []}
    try:
        for bucket_mb in bucket_mbs:
            resharder = Resharder(engine.model, spec, target=vllm, bucket_mb=bucket_mb,
                                  keep_buffer=keep_buffer)
            run = {"bucket_mb": bucket_mb, "warm": [], "verified_runs": []}
            for i in range(1 + 2 * warm_repeats):   # cold, then warm and verified in turn
                verify = i > 0 and i % 2 == 0
                torch.distributed.barrier()
                meter = PeakRSS([os.getpid(), vllm.process.pid]) if vllm else None
                if meter:
                    meter.__enter__()
                stats = resharder.sync(verify=verify)
                torch.distributed.barrier()
                if meter:
                    meter.__exit__()
                    entry = {"stats": dataclasses.asdict(stats), "host_extra": meter.extra[0],
                             "vllm_extra": meter.extra[1]}
                    if i == 0:
                        run["cold"] = entry
                    else:
                        run["verified_runs" if verify else "warm"].append(entry)
            sent = torch.tensor([stats.bytes if rank == 0 else 0], dtype=torch.int64)
            torch.distributed.broadcast(sent, 0)     # the bytes rank 0 counted for the sync
            floor_s = parallel_memcpy_seconds(int(sent.item()), int(bucket_mb * MIB))
            if vllm:
                run["floor_s"], run["writers"] = floor_s, world
                run["memcpy_1thread_s"] = memcpy_seconds(stats.bytes, int(bucket_mb * MIB))
                run["sample"] = vllm.generate([[5, 6, 7]], n=1).response_token_ids[0]
            results["runs"].append(run)
    finally:
        if vllm:
            vllm.close()
        ps.destroy_model_parallel()
    return results if rank == 0 else None


def engines_body(rank, world, spec, hf_dir, tp, pp, bucket_mb, warm_repeats, counts):
    """The trainer's own path to many engines: rank 0 starts a local Ray, N `VLLMEngine`
    actors (one logical CPU each, dummy weights) and feeds them through `EngineFanout`; every
    rank builds the `Resharder` per engine count (shared-memory bucket transport: each engine
    maps the same bucket). Median warm sync seconds per engine count."""
    import torch
    from megatron.core import parallel_state as ps

    from mindrl.config.schema import GenerateConfig, SamplingConfig
    from mindrl.engines.megatron_engine import MegatronEngine
    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.weight_sync.engine_fanout import EngineFanout
    from mindrl.weight_sync.resharder import Resharder

    parallel = Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    initialize_parallel(parallel)
    engine = MegatronEngine(spec, parallel)
    results = {}
    if rank == 0:
        import ray

        from mindrl.engines.vllm_engine import VLLMEngine

        ray.init(address="local", num_cpus=max(counts), include_dashboard=False,
                 log_to_driver=False, object_store_memory=256 * MIB)
        cfg = GenerateConfig(max_num_seqs=4, max_model_len=256, kv_cache_memory_bytes=64 * MIB,
                             sampling_config=SamplingConfig(max_tokens=4))
        env = {"OMP_NUM_THREADS": "1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
        actors = [ray.remote(VLLMEngine).options(num_cpus=1, runtime_env={"env_vars": env})
                  .remote(hf_dir, cfg, load_format="dummy") for _ in range(max(counts))]
        ray.get([a.describe.remote() for a in actors])
    try:
        for count in counts:
            target = EngineFanout(actors[:count]) if rank == 0 else None
            resharder = Resharder(engine.model, spec, target=target, bucket_mb=bucket_mb)
            times = []
            for i in range(warm_repeats + 1):      # cold, then warm
                torch.distributed.barrier()
                stats = resharder.sync()
                torch.distributed.barrier()
                if i:
                    times.append(stats.seconds)
            if rank == 0:
                results[count] = {"sync_s": statistics.median(times), "bytes": stats.bytes,
                                  "transport": stats.transport}
    finally:
        if rank == 0:
            import ray

            ray.shutdown()
        ps.destroy_model_parallel()
    return results if rank == 0 else None


def engines_main(args, spec) -> None:
    from mindrl.distributed import spawn_local

    counts = [int(c) for c in args.engines.split(",")]
    bucket_mb = float(args.bucket_mb.split(",")[-1])
    with tempfile.TemporaryDirectory(prefix="bench-reshard-") as tmp:
        write_config_dir(spec, Path(tmp))
        res = spawn_local(engines_body, args.tp * args.pp, spec, tmp, args.tp, args.pp,
                          bucket_mb, args.repeats, counts)[0]
    print(f"\nreshard {args.model} ({spec.num_layers} layers, fp32) TP{args.tp} x PP{args.pp} "
          f"-> N vLLM engines (Ray actors, one logical CPU each, packed), bucket {bucket_mb:g} MiB")
    print(f"{'engines':>7} {'transport':>10} {'GiB':>6} {'sync s':>7} {'vs 1':>6}")
    base = res[counts[0]]["sync_s"]
    for count in counts:
        r = res[count]
        print(f"{count:>7} {r['transport']:>10} {r['bytes'] / 2**30:>6.2f} {r['sync_s']:>7.2f} "
              f"{r['sync_s'] / base:>6.2f}")
    summary = {"bench": "reshard_engines", "model": args.model, "layers": spec.num_layers,
               "tp": args.tp, "pp": args.pp, "bucket_mb": bucket_mb, "cores": os.cpu_count(),
               "sync_s": {str(c): round(res[c]["sync_s"], 3) for c in counts}}
    if 1 in res and 4 in res:
        summary["engines_4_over_1"] = round(res[4]["sync_s"] / res[1]["sync_s"], 2)
        summary["goal"] = "<= 1.3 (engines loading side by side on cores of their own)"
    emit(summary, results=args.results)


def write_config_dir(spec, out: Path) -> None:
    """config.json + tokenizer: all vLLM needs with load_format="dummy" (no 2 GB of weights)."""
    from mindrl.models.hf_config import hf_config_from_spec
    from mindrl.models.tokenizers import build_tokenizer

    tok = build_tokenizer("char")
    hf_config_from_spec(spec, torch_dtype="float32", bos_token_id=tok.pad_token_id,
                        eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id).save_pretrained(out)
    tok.save_pretrained(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen25-0.5b")
    ap.add_argument("--layers", type=int, default=None, help="override num_layers")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--bucket-mb", default="512", help="comma-separated bucket sizes")
    ap.add_argument("--repeats", type=int, default=2, help="warm syncs (and as many verified ones) per bucket size")
    ap.add_argument("--cpu-weights", default="packed,shared",
                    help="comma-separated vLLM CPU weight modes, one spawn each: packed "
                         "(oneDNN; each sync repacks), plain (one copy per sync into vLLM's "
                         "parameters), shared (plain, in shared memory the ranks write "
                         "directly); generate_config.cpu_weights")
    ap.add_argument("--keep-buffer", action="store_true",
                    help="keep the shared bucket buffers between syncs (Resharder keep_buffer)")
    ap.add_argument("--engines", default=None,
                    help="comma-separated engine counts, e.g. 1,2,4: one sync feeding that many "
                         "vLLM engines (Ray actors, the trainer's path); prints engines_4_over_1")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    modes = args.cpu_weights.split(",")
    unknown = sorted(set(modes) - {"packed", "plain", "shared"})
    if unknown:
        ap.error(f"--cpu-weights: unknown mode(s) {unknown}; use packed, plain, shared")

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import warnings

    warnings.filterwarnings("ignore")
    from mindrl.distributed import spawn_local
    from mindrl.config.model_spec import load_model_spec

    spec = load_model_spec(args.model)
    if args.layers:
        spec = dataclasses.replace(spec, num_layers=args.layers)
    if args.engines:
        return engines_main(args, spec)
    buckets = [float(b) for b in args.bucket_mb.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-reshard-") as tmp:
        write_config_dir(spec, Path(tmp))
        for mode in modes:
            wall = time.perf_counter()
            results[mode] = spawn_local(rank_body, args.tp * args.pp, spec, tmp, args.tp,
                                        args.pp, buckets, args.repeats, mode,
                                        args.keep_buffer)[0]
            results[mode]["wall"] = time.perf_counter() - wall

    print(f"\nreshard {args.model} ({spec.num_layers} layers, {spec.num_parameters() / 1e6:.0f}M "
          f"params, fp32) TP{args.tp} x PP{args.pp} -> vLLM (infer TP1, child process); "
          + ", ".join(f"{m}: model build {r['build_s']:.1f}s, wall {r['wall']:.0f}s"
                      for m, r in results.items()))
    header = (f"{'weights':>7} {'bucket MiB':>10} {'buffer MiB':>10} {'buckets':>7} {'GiB':>6} "
              f"{'floor s':>7} {'1thr s':>6} {'cold s':>7} {'warm s':>7} {'ratio':>6} {'gather':>7} "
              f"{'pack':>6} {'load':>6} {'verify s':>8} {'actor':>6} {'vLLM':>6} {'host +MiB':>9} "
              f"{'vLLM +MiB':>9}")
    print(header)
    print("-" * len(header))
    rows = []
    for mode, res in results.items():
        for run in res["runs"]:
            row = summarize(run)
            row["cpu_weights"] = mode
            rows.append(row)
            print(f"{mode:>7} {row['bucket_mb']:>10.0f} {row['buffer_mib']:>10.0f} "
                  f"{row['buckets']:>7} {row['bytes'] / 2**30:>6.2f} {row['floor_s']:>7.3f} "
                  f"{row['memcpy_1thread_s']:>6.3f} "
                  f"{row['cold_s']:>7.2f} {row['sync_s']:>7.2f} {row['ratio_to_floor']:>6.2f} "
                  f"{row['gather_s']:>7.2f} {row['pack_s']:>6.2f} {row['load_s']:>6.2f} "
                  f"{row['verify_s']:>8.2f} {row['verify_actor_s']:>6.2f} "
                  f"{row['verify_s'] - row['verify_actor_s']:>6.2f} {row['peak_extra_mib']:>9.0f} "
                  f"{row['vllm_peak_extra_mib']:>9.0f}")
    print(f"floor s: memcpy of the same bytes by {args.tp * args.pp} writer processes (the "
          "ranks), each its share; 1thr s: single-thread memcpy on rank 0 (reference only); "
          "warm s: median of the warm syncs; ratio: warm / floor; gather: ranks writing the "
          "bucket or vLLM's shared weights (or TP gather + PP receive); pack: un-fuse + copy "
          "into the bucket; load: waiting for vLLM's loads; verify s: a verified sync's check, of which "
          "actor: the ranks' probe products (expected fingerprints), vLLM: the engine digesting "
          "its weights and comparing; host/vLLM +MiB: peak private "
          "memory above the pre-sync value, rank 0 (plus the shared bucket) / vLLM process")
    best = min(rows, key=lambda r: r["ratio_to_floor"])
    summary = {"bench": "reshard", "model": args.model, "layers": spec.num_layers,
               "tp": args.tp, "pp": args.pp, "dtype": "float32", "keep_buffer": args.keep_buffer,
               "ratio_to_floor": round(best["ratio_to_floor"], 2),
               "cpu_weights": best["cpu_weights"], "sync_s": round(best["sync_s"], 3),
               "floor_s": round(best["floor_s"], 4), "floor_writers": best["writers"],
               "memcpy_1thread_s": round(best["memcpy_1thread_s"], 4),
               "peak_extra_mib": round(best["peak_extra_mib"], 1),
               "bucket_mb": best["bucket_mb"], "bytes": best["bytes"],
               "verify_overhead": round(best["verify_overhead"], 3),
               "verify_overhead_goal": "<= 0.05 (verified sync / unverified - 1)"}
    for mode in results:     # each mode's figures at the largest bucket
        row = [r for r in rows if r["cpu_weights"] == mode][-1]
        summary[f"ratio_to_floor_{mode}"] = round(row["ratio_to_floor"], 2)
        summary[f"peak_extra_mib_{mode}"] = round(row["peak_extra_mib"], 1)
        summary[f"verify_overhead_{mode}"] = round(row["verify_overhead"], 3)
        summary[f"verify_s_{mode}"] = round(row["verify_s"], 3)
        summary[f"verify_actor_s_{mode}"] = round(row["verify_actor_s"], 3)
    summary["runs"] = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                       for r in rows]
    emit(summary, results=args.results)


def summarize(run) -> dict:
    """One bucket size's figures: the median warm sync and the peaks over cold + warm."""
    warm = [w["stats"]["seconds"] for w in run["warm"]]
    warm_s = statistics.median(warm)
    mid = sorted(run["warm"], key=lambda w: w["stats"]["seconds"])[len(warm) // 2]["stats"]
    host_extra = max([w["host_extra"] for w in run["warm"]]
                     + [run["cold"]["host_extra"]]) + mid["buffer_bytes"]
    vllm_extra = max([w["vllm_extra"] for w in run["warm"]] + [run["cold"]["vllm_extra"]])
    return {"bucket_mb": run["bucket_mb"], "buffer_mib": mid["buffer_bytes"] / MIB,
            "buckets": mid["buckets"], "bytes": mid["bytes"], "floor_s": run["floor_s"],
            "writers": run["writers"], "memcpy_1thread_s": run["memcpy_1thread_s"],
            "cold_s": run["cold"]["stats"]["seconds"], "sync_s": warm_s,
            "ratio_to_floor": warm_s / run["floor_s"],
            "gather_s": mid["gather_seconds"], "pack_s": mid["pack_seconds"],
            "load_s": mid["load_seconds"],
            "verify_s": statistics.median(v["stats"]["verify_seconds"]
                                          for v in run["verified_runs"]),
            "verify_actor_s": statistics.median(v["stats"]["expected_seconds"]
                                                for v in run["verified_runs"]),
            "verified_sync_s": statistics.median(v["stats"]["seconds"]
                                                 for v in run["verified_runs"]),
            "verify_overhead": statistics.median(v["stats"]["seconds"]
                                                 for v in run["verified_runs"]) / warm_s - 1,
            "peak_extra_mib": host_extra / MIB, "vllm_peak_extra_mib": vllm_extra / MIB}


if __name__ == "__main__":
    main()
