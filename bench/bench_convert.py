"""Checkpoint conversion throughput and memory, against a plain copy of the same bytes.

    python bench/bench_convert.py                      # qwen25-0.5b shape, fp32, random init
    python bench/bench_convert.py --model tiny-qwen2   # a quick smoke run

Makes a random-init HF checkpoint of the shape, then, in interleaved rounds, copies its
safetensors files and converts HF -> mcore and mcore -> HF, each conversion in a fresh process
so that its peak RSS is its own. The baseline is a plain copy through memory (read into a
buffer, write out: the least a converter does, since it must hold the bytes to transform
them); the kernel's own copy (sendfile, bytes never enter a process) and the memory copy with
fsync (the converter fsyncs what it writes) are shown beside it. Conversion time is measured
inside the converting process (interpreter start and imports excluded; shown as CLI wall).
Peak RSS is the process tree's: the converting process and every process under it (writer
processes, such as Megatron's default checkpoint writer forks, if any start; MindRL's
converter writes in-process, and `tree_processes` reports the most processes seen at once),
their RSS summed every 5 ms by a sampling thread in this process (psutil), the peak of that
sum kept; it is never below the converting process's own ru_maxrss, which is exact for that
process alone and shown beside it (`peak_rss_parent_gib`). The sum counts pages a forked
child shares with its parent once per process, so it is an upper bound on the tree's
memory, never an under-count.
Targets: throughput >= 0.5x the copy; peak RSS (the tree's) <= 2 GiB + 2 x the largest tensor.
Prints a table, then one JSON line.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GIB = 2 ** 30

from bench.common.results import add_results_argument, emit  # noqa: E402


def _worker(direction: str, src: str, dst: str) -> None:
    """Run one conversion in this process; print its figures as JSON."""
    import warnings

    os.environ.setdefault("MINDRL_DEVICE", "cpu")
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    from mindrl.ckpt import converter
    # One-time imports are process start-up, reported as CLI overhead, not conversion time.
    import megatron.core.dist_checkpointing  # noqa: F401
    import megatron.core.models.gpt  # noqa: F401
    import megatron.core.models.gpt.gpt_layer_specs  # noqa: F401  (the builder imports it late)
    import mindrl.models.builder  # noqa: F401
    import mindrl.models.hf_config  # noqa: F401

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    if direction == "hf2mg":
        converter.hf_to_mcore(src, dst, progress=False)
    else:
        converter.mcore_to_hf(src, dst, progress=False)
    seconds = time.perf_counter() - start
    print(json.dumps({
        "seconds": seconds,
        "rss_after_imports": rss_before,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))


class TreeRSS:
    """Samples the summed RSS of a process and all its descendants in a thread; keeps the
    peak of the sum and the largest number of processes seen at once."""

    def __init__(self, pid: int, interval: float = 0.005):
        import psutil

        self.psutil, self.root = psutil, psutil.Process(pid)
        self.interval, self.stop = interval, threading.Event()
        self.peak, self.processes = 0, 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except self.psutil.Error:
            return
        total = 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except self.psutil.Error:     # exited between listing and reading
                pass
        self.peak, self.processes = max(self.peak, total), max(self.processes, len(procs))

    def _run(self) -> None:
        while not self.stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def _run_worker(direction: str, src: Path, dst: Path) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--worker", direction, str(src), str(dst)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    tree = TreeRSS(proc.pid)
    try:
        stdout, stderr = proc.communicate()
    finally:
        tree.close()
    if proc.returncode:
        raise SystemExit(f"{direction} failed:\n{stderr[-4000:]}")
    figures = json.loads(stdout.strip().splitlines()[-1])
    figures["wall"] = time.perf_counter() - start
    figures["peak_rss_tree"] = max(tree.peak, figures["peak_rss"])
    figures["tree_processes"] = tree.processes
    return figures


def _warm(paths) -> None:
    """Read files once (untimed) so every step starts with its input in the page cache: on a
    shared host, whether a source was evicted swings a step's time by several x."""
    buf = bytearray(64 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def _copy(files, out: Path, kernel: bool, fsync: bool = False) -> float:
    """Seconds to copy the files: in the kernel (shutil.copyfile: sendfile, bytes never enter
    the process) or through user memory (readinto one reused 64 MiB buffer, write), which is
    the least any converter does: it must hold the bytes to transform them."""
    _warm(files)
    os.sync()
    out.mkdir(parents=True)
    buf = bytearray(64 << 20)
    view = memoryview(buf)
    start = time.perf_counter()
    for f in files:
        dst = out / f.name
        if kernel:
            shutil.copyfile(f, dst)
        else:
            with open(f, "rb", buffering=0) as src, open(dst, "wb", buffering=0) as out_f:
                while n := src.readinto(buf):
                    out_f.write(view[:n])
        if fsync:
            fd = os.open(dst, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    seconds = time.perf_counter() - start
    os.sync()
    shutil.rmtree(out)
    return seconds


def _largest_tensor_bytes(hf_dir: Path) -> int:
    from mindrl.ckpt.hf_io import HFWeights, tensor_nbytes

    with HFWeights.open(hf_dir) as w:
        return max(tensor_nbytes(w.shape(n), w.dtype(n)) for n in w.names())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen25-0.5b", help="a configs/model shape")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--work-dir", default=None, help="scratch space (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch files")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best kept")
    parser.add_argument("--worker", nargs=3, metavar=("DIRECTION", "SRC", "DST"),
                        help=argparse.SUPPRESS)
    add_results_argument(parser)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker)
        return

    work = Path(tempfile.mkdtemp(prefix="bench-convert-", dir=args.work_dir))
    try:
        hf = work / "hf"
        start = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "cli" / "make_tiny_model.py"), "--model",
                        args.model, "--tokenizer", "char", "--dtype", args.dtype, "--out",
                        str(hf)], check=True, capture_output=True)
        made = time.perf_counter() - start
        files = sorted(hf.glob("*.safetensors"))
        nbytes = sum(f.stat().st_size for f in files)
        largest = _largest_tensor_bytes(hf)

        # The disk and page cache are shared and noisy: steps are interleaved over rounds,
        # flushed in between (no step pays for another's write-back), and each step's best
        # time is kept.
        times = {k: [] for k in ("kernel", "user", "user_fsync", "hf2mg", "mg2hf")}
        figures = {"hf2mg": [], "mg2hf": []}
        for _ in range(args.rounds):
            # Each copy twice in a row: whichever copy follows another kind of step ran up to
            # 4x slower here (an order effect of the host, not of the copy).
            for kind, kernel, fsync in (("kernel", True, False), ("user", False, False),
                                        ("user_fsync", False, True)):
                times[kind].append(min(_copy(files, work / "copy", kernel, fsync)
                                       for _ in range(2)))
            for direction, src, dst in (("hf2mg", hf, work / "mg"),
                                        ("mg2hf", work / "mg", work / "hf_back")):
                shutil.rmtree(dst, ignore_errors=True)
                _warm(p for p in Path(src).rglob("*") if p.is_file())
                os.sync()
                figures[direction].append(_run_worker(direction, src, dst))
                times[direction].append(figures[direction][-1]["seconds"])
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    best = {k: min(v) for k, v in times.items()}
    to_mg, to_hf = (min(figures[d], key=lambda f: f["seconds"]) for d in ("hf2mg", "mg2hf"))
    peak = {d: max(f["peak_rss_tree"] for f in figures[d]) for d in figures}
    parent = {d: max(f["peak_rss"] for f in figures[d]) for d in figures}
    procs = {d: max(f["tree_processes"] for f in figures[d]) for d in figures}
    rss_limit = 2 * GIB + 2 * largest
    baseline = best["user"]
    rows = [("copy in the kernel (sendfile)", best["kernel"], None, None, None),
            ("copy through memory [baseline]", best["user"], None, None, None),
            ("copy through memory + fsync", best["user_fsync"], None, None, None),
            ("HF -> mcore (torch_dist)", best["hf2mg"], peak["hf2mg"], parent["hf2mg"],
             to_mg["wall"]),
            ("mcore -> HF (safetensors)", best["mg2hf"], peak["mg2hf"], parent["mg2hf"],
             to_hf["wall"])]
    print(f"model {args.model} ({args.dtype}, random init made in {made:.0f} s): "
          f"{nbytes / GIB:.2f} GiB in {len(files)} file(s), largest tensor "
          f"{largest / GIB:.3f} GiB; RSS limit 2 GiB + 2 x largest = {rss_limit / GIB:.2f} GiB; "
          f"best of {args.rounds} interleaved rounds")
    print(f"{'step':<32} {'seconds':>8} {'GiB/s':>7} {'x base':>7} {'tree RSS':>9} "
          f"{'parent':>8} {'CLI wall':>9}")
    for name, seconds, rss, kid, wall in rows:
        gib = lambda v: f"{v / GIB:.2f}" if v is not None else "-"  # noqa: E731
        print(f"{name:<32} {seconds:8.2f} {nbytes / seconds / GIB:7.2f} "
              f"{baseline / seconds:7.2f} {gib(rss):>9} {gib(kid):>8} "
              f"{(f'{wall:.1f}' if wall else '-'):>9}")
    print("x base: throughput / copy through memory. tree RSS: peak of the summed RSS of the "
          "converting process and all its child processes (sampled every 5 ms; shared pages "
          "are counted once per process: an upper bound); parent: the converting "
          "process alone (ru_maxrss). Processes in the tree at once, most seen: "
          + ", ".join(f"{d} {procs[d]}" for d in procs) + ". CLI wall adds interpreter start "
          "and imports.")

    ratio = {d: baseline / best[d] for d in ("hf2mg", "mg2hf")}
    result = {
        "bench": "convert", "model": args.model, "dtype": args.dtype, "rounds": args.rounds,
        "ratio_to_copy": round(min(ratio.values()), 3),
        "ratio_to_copy_hf2mcore": round(ratio["hf2mg"], 3),
        "ratio_to_copy_mcore2hf": round(ratio["mg2hf"], 3),
        "ratio_to_kernel_copy": round(min(best["kernel"] / best[d] for d in ratio), 3),
        "ratio_to_fsync_copy": round(min(best["user_fsync"] / best[d] for d in ratio), 3),
        "peak_rss_gib": round(max(peak.values()) / GIB, 3),
        "peak_rss_gib_hf2mcore": round(peak["hf2mg"] / GIB, 3),
        "peak_rss_gib_mcore2hf": round(peak["mg2hf"] / GIB, 3),
        "peak_rss_parent_gib": round(max(parent.values()) / GIB, 3),
        "tree_processes": procs,
        "rss_after_imports_gib": round(to_mg["rss_after_imports"] / GIB, 3),
        "largest_tensor_gib": round(largest / GIB, 3),
        "rss_limit_gib": round(rss_limit / GIB, 3),
        "model_gib": round(nbytes / GIB, 3),
        "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "meets_targets": bool(min(ratio.values()) >= 0.5 and max(peak.values()) <= rss_limit),
    }
    emit(result, results=args.results)


if __name__ == "__main__":
    main()
