#!/usr/bin/env bash
# R1-Zero GRPO on Qwen2.5-7B across nodes: run this on the master node, then
# r1_zero_qwen25_7b_worker.sh on every other node, then training starts here once
# all devices have joined. Paths and sizes are in configs/rlxf/r1_zero_qwen25_7b.yaml.
set -euo pipefail
MASTER_ADDR=${MASTER_ADDR:-$(hostname -I | awk '{print $1}')}
RAY_PORT=${RAY_PORT:-6379}
NNODES=${NNODES:-2}
DEVICES_PER_NODE=${DEVICES_PER_NODE:-8}
RESOURCE=${RESOURCE:-NPU}          # NPU (Ascend) or GPU
CONFIG=${CONFIG:-r1_zero_qwen25_7b}

# Collective-communication settings (see README "Many nodes").
export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1800}
export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-1800}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-}
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-}
export HCCL_SOCKET_IFNAME=${HCCL_SOCKET_IFNAME:-}

cd "$(dirname "$0")/../../.."
ray stop --force >/dev/null 2>&1 || true
if [ "$RESOURCE" = "GPU" ]; then
  ray start --head --port "$RAY_PORT" --num-gpus "$DEVICES_PER_NODE"
else
  ray start --head --port "$RAY_PORT" --resources "{\"NPU\": $DEVICES_PER_NODE}"
fi

want=$((NNODES * DEVICES_PER_NODE))
echo "waiting for $want ${RESOURCE}s from $NNODES nodes..."
until python - "$RESOURCE" "$want" <<'PY'
import sys, ray
ray.init(address="auto", logging_level="ERROR")
have = ray.cluster_resources().get(sys.argv[1], 0)
ray.shutdown()
sys.exit(0 if have >= int(sys.argv[2]) else 1)
PY
do sleep 5; done

RAY_ADDRESS=auto python cli/train_grpo.py --config-name "$CONFIG" "$@"
