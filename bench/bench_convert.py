"""Checkpoint conversion throughput and memory, against a plain copy of the same bytes.

    python bench/bench_convert.py                      # qwen25-0.5b shape, fp32, random init
    python bench/bench_convert.py --model tiny-qwen2   # a quick smoke run

Makes a random-init HF checkpoint of the shape, copies its safetensors files (the baseline:
shutil.copyfile, i.e. the kernel's copy, plus the same again with fsync, since the converter
fsyncs what it writes), then converts HF -> mcore and mcore -> HF, each in a fresh process so
that its peak RSS is its own. Conversion time is measured inside that process around the
conversion (interpreter start and imports excluded; printed separately as CLI overhead).
Targets: throughput >= 0.5x the copy; peak RSS <= 2 GiB + 2 x the largest tensor.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2 ** 30


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
        "peak_rss_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    }))


def _run_worker(direction: str, src: Path, dst: Path) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--worker", direction, str(src), str(dst)],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode:
        raise SystemExit(f"{direction} failed:\n{done.stderr[-4000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["wall"] = time.perf_counter() - start
    return figures


def _copy(files, out: Path, fsync: bool) -> float:
    out.mkdir(parents=True)
    start = time.perf_counter()
    for f in files:
        dst = out / f.name
        shutil.copyfile(f, dst)
        if fsync:
            fd = os.open(dst, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    return time.perf_counter() - start


def _largest_tensor_bytes(hf_dir: Path) -> int:
    from mindrl.ckpt.hf_io import HFWeights, _nbytes

    with HFWeights.open(hf_dir) as w:
        return max(_nbytes(w.shape(n), w.dtype(n)) for n in w.names())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen25-0.5b", help="a configs/model shape")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--work-dir", default=None, help="scratch space (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch files")
    parser.add_argument("--worker", nargs=3, metavar=("DIRECTION", "SRC", "DST"),
                        help=argparse.SUPPRESS)
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

        copy_s = _copy(files, work / "copy", fsync=False)
        copy_sync_s = _copy(files, work / "copy_fsync", fsync=True)
        shutil.rmtree(work / "copy")
        shutil.rmtree(work / "copy_fsync")
        to_mg = _run_worker("hf2mg", hf, work / "mg")
        to_hf = _run_worker("mg2hf", work / "mg", work / "hf_back")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    copy_rate = nbytes / copy_s
    rows = [("plain copy (shutil.copyfile)", copy_s, None, None, None),
            ("plain copy + fsync", copy_sync_s, None, None, None),
            ("HF -> mcore (torch_dist)", to_mg["seconds"], to_mg["peak_rss"],
             to_mg["peak_rss_children"], to_mg["wall"]),
            ("mcore -> HF (safetensors)", to_hf["seconds"], to_hf["peak_rss"],
             to_hf["peak_rss_children"], to_hf["wall"])]
    rss_limit = 2 * GIB + 2 * largest
    print(f"model {args.model} ({args.dtype}, random init made in {made:.0f} s): "
          f"{nbytes / GIB:.2f} GiB in {len(files)} file(s), largest tensor "
          f"{largest / GIB:.3f} GiB; RSS limit 2 GiB + 2 x largest = {rss_limit / GIB:.2f} GiB")
    print(f"{'step':<30} {'seconds':>8} {'GiB/s':>7} {'x copy':>7} {'peak RSS':>9} "
          f"{'writers':>8} {'CLI wall':>9}")
    for name, seconds, rss, child, wall in rows:
        rate = nbytes / seconds
        fmt = lambda v, unit="": f"{v / GIB:.2f}{unit}" if v is not None else "-"  # noqa: E731
        print(f"{name:<30} {seconds:8.2f} {rate / GIB:7.2f} {rate / copy_rate:7.2f} "
              f"{fmt(rss):>9} {fmt(child):>8} {(f'{wall:.1f}' if wall else '-'):>9}")
    print("peak RSS: the converting process (ru_maxrss); writers: Megatron's forked file "
          "writers, which share the parent's pages. CLI wall adds interpreter start + imports.")

    ratio_mg = copy_s / to_mg["seconds"]
    ratio_hf = copy_s / to_hf["seconds"]
    peak = max(to_mg["peak_rss"], to_hf["peak_rss"])
    result = {
        "bench": "convert", "model": args.model, "dtype": args.dtype,
        "ratio_to_copy": round(min(ratio_mg, ratio_hf), 3),
        "ratio_to_copy_hf2mcore": round(ratio_mg, 3),
        "ratio_to_copy_mcore2hf": round(ratio_hf, 3),
        "ratio_to_fsync_copy": round(min(copy_sync_s / to_mg["seconds"],
                                         copy_sync_s / to_hf["seconds"]), 3),
        "peak_rss_gib": round(peak / GIB, 3),
        "peak_rss_gib_hf2mcore": round(to_mg["peak_rss"] / GIB, 3),
        "peak_rss_gib_mcore2hf": round(to_hf["peak_rss"] / GIB, 3),
        "rss_after_imports_gib": round(to_mg["rss_after_imports"] / GIB, 3),
        "largest_tensor_gib": round(largest / GIB, 3),
        "rss_limit_gib": round(rss_limit / GIB, 3),
        "model_gib": round(nbytes / GIB, 3),
        "copy_gib_per_s": round(copy_rate / GIB, 3),
        "seconds_hf2mcore": round(to_mg["seconds"], 2),
        "seconds_mcore2hf": round(to_hf["seconds"], 2),
        "meets_targets": bool(min(ratio_mg, ratio_hf) >= 0.5 and peak <= rss_limit),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
