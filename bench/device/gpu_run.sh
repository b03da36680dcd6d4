#!/usr/bin/env bash
# The one-shot GPU run: bench/device/check_device.py (parity with transformers in fp32 and
# bf16, parts 1-2; packed vs padded on the device, part 5: fp32 thresholds, bf16 figures and
# the attention path, the ~0.5B update-step timing; the fp32/bf16 update throughput, part 4),
# then the device-bucket weight sync (its test and bench/device/bench_device_ipc.py) and the
# update's MFU (bench/profile_update.py, qwen25-1.5b, bf16). No vLLM and no Ray on that machine:
# --no-rollout, which imports neither. CHECK_ARGS replaces check_device's --pack-fp32.
#
#   bash bench/device/gpu_run.sh   # figures and logs go to $OUT (default /tmp/check_device_out)
#   MINDRL_DEVICE=cpu SITE=/tmp/x bash bench/device/gpu_run.sh --steps 0 --pack-model tiny-qwen2
#                                  # a rehearsal: later check_device arguments override these
#
# Needs the wheels the machine lacks in .whl/ (megatron-core, hydra-core, omegaconf, antlr4:
# not in git), installed into $SITE (default /tmp/site) unless importable already. Ends within
# about 12 minutes at worst, 5 normally: the compile probe is cut at 45 s, the check at 200 s
# (its optional parts, part 4 and part 5c in fp32, skipped once it has run 120 s), the sync's
# test and bench at 120 s each, the profile at 240 s. $OUT gets check_device.json (rewritten
# after every part, so a cut run keeps what it measured), device_ipc.json,
# profile_update.json, run.log, env.txt (GPU, torch, varlen_attn's signature),
# compile_probe.txt and results/<bench>.jsonl.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/check_device_out}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"

export PYTHONPATH=$SITE:$PWD HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Every bench appends its final line, with machine, date and commit, to $OUT/results/<bench>.jsonl
# (bench/common/results.py): copy them into bench/results/ to keep the figures.
export MINDRL_BENCH_RESULTS=${MINDRL_BENCH_RESULTS:-$OUT/results}
if ! python3 -c "import megatron.core, hydra, omegaconf" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl \
        || { echo "wheel install failed" | tee "$OUT/check_device.log"; exit 1; }
fi

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    python3 - <<'EOF' 2>&1
import inspect, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
try:
    from torch.nn.attention.varlen import varlen_attn
    print("varlen_attn", inspect.signature(varlen_attn))
except ImportError as exc:
    print("no varlen_attn:", exc)
from mindrl import device
print("mindrl device", device.device_type(), "varlen bf16:",
      device.varlen_attention(torch.bfloat16) is not None)
EOF
} > "$OUT/env.txt"
cat "$OUT/env.txt"

# Megatron's fused bias kernels go through torch.compile on a device, which needs Triton to
# build its launcher (a C compiler, Python's headers). Where that fails, run them eagerly
# (TORCHDYNAMO_DISABLE, recorded in the figures) rather than lose the run.
if ! timeout 45 python3 -c "
import torch
f = torch.compile(lambda x: torch.nn.functional.silu(x) * 2 + 1)
print('torch.compile works:', f(torch.ones(8, device='cuda')).sum().item())
" > "$OUT/compile_probe.txt" 2>&1; then
    echo "torch.compile failed here (see compile_probe.txt): TORCHDYNAMO_DISABLE=1" \
        | tee -a "$OUT/compile_probe.txt"
    export TORCHDYNAMO_DISABLE=1
fi

LOG=$OUT/run.log
timeout -k 10 200 python3 -u bench/device/check_device.py --no-rollout --deadline-s 120 \
    --json-out "$OUT/check_device.json" ${CHECK_ARGS---pack-fp32} "$@" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
echo "check_device exit code $rc (124: cut at 200 s; check_device.json holds the parts done)" \
    | tee -a "$LOG"

# The device-bucket weight sync (CUDA IPC handles): its test, then its figures on a real shape.
timeout -k 10 120 python3 -m pytest -q -p no:cacheprovider tests/weight_sync/test_device_bucket.py \
    2>&1 | tail -n 15 | tee -a "$LOG"
test_rc=${PIPESTATUS[0]}
echo "device bucket test exit code $test_rc" | tee -a "$LOG"
timeout -k 10 120 python3 -u bench/device/bench_device_ipc.py --model "${IPC_MODEL:-qwen25-1.5b}" \
    --json-out "$OUT/device_ipc.json" 2>&1 | tail -n 20 | tee -a "$LOG"
ipc_rc=${PIPESTATUS[0]}
echo "bench_device_ipc exit code $ipc_rc" | tee -a "$LOG"

# MFU of the update: qwen25-1.5b, bf16, 4k real tokens per packed micro batch, Megatron's
# distributed optimizer, under torch.profiler (top costs by device and host time).
timeout -k 10 240 python3 -u bench/profile_update.py --model "${MFU_MODEL:-qwen25-1.5b}" \
    --budget "${MFU_BUDGET:-4096}" --distributed-optimizer --top 30 \
    --json-out "$OUT/profile_update.json" 2>&1 | tee -a "$LOG" | tail -n 80
mfu_rc=${PIPESTATUS[0]}
echo "profile_update exit code $mfu_rc" | tee -a "$LOG"
for code in "$rc" "$test_rc" "$ipc_rc" "$mfu_rc"; do
    [ "$code" = 0 ] || exit 1
done
exit 0
