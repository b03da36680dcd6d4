#!/usr/bin/env bash
# The one-shot GPU run of bench/check_device.py: parity with transformers (parts 1-2), packed vs
# padded on the device (part 5: fp32 thresholds, bf16 figures and the attention path, the
# ~0.5B update-step timing in bf16 and fp32) and the fp32/bf16 update throughput (part 4).
# No vLLM and no Ray on that machine: --no-rollout, which imports neither.
#
#   bash bench/gpu_run.sh          # figures and logs go to $OUT (default /tmp/check_device_out)
#   MINDRL_DEVICE=cpu SITE=/tmp/x bash bench/gpu_run.sh --steps 0 --pack-model tiny-qwen2 ...
#                                  # a rehearsal: later check_device arguments override these
#
# Needs the wheels the machine lacks in .whl/ (megatron-core, hydra-core, omegaconf, antlr4:
# not in git), installed into $SITE (default /tmp/site) unless importable already. Ends within
# about 5 minutes at worst, 2-3 normally: the compile probe is cut at 45 s, the check at 200 s,
# and its optional parts (part 4, part 5c in fp32) are skipped once it has run 120 s. $OUT gets
# check_device.json (rewritten after every part, so a cut run keeps what it measured),
# check_device.log, env.txt (GPU, torch, varlen_attn's signature) and compile_probe.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/check_device_out}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"

export PYTHONPATH=$SITE:$PWD HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
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

timeout -k 10 200 python3 -u bench/check_device.py --no-rollout --pack-fp32 --deadline-s 120 \
    --json-out "$OUT/check_device.json" "$@" 2>&1 | tee "$OUT/check_device.log"
rc=${PIPESTATUS[0]}
echo "check_device exit code $rc (124: cut at 200 s; check_device.json holds the parts done)" \
    | tee -a "$OUT/check_device.log"
exit "$rc"
