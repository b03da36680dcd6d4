#!/usr/bin/env bash
# Join the master's Ray cluster from a worker node (see r1_zero_qwen25_7b_master.sh).
set -euo pipefail
: "${MASTER_ADDR:?set MASTER_ADDR to the address of the master node}"
RAY_PORT=${RAY_PORT:-6379}
DEVICES_PER_NODE=${DEVICES_PER_NODE:-8}
RESOURCE=${RESOURCE:-NPU}
export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1800}
export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-1800}
ray stop --force >/dev/null 2>&1 || true
if [ "$RESOURCE" = "GPU" ]; then
  ray start --address "$MASTER_ADDR:$RAY_PORT" --num-gpus "$DEVICES_PER_NODE" --block
else
  ray start --address "$MASTER_ADDR:$RAY_PORT" --resources "{\"NPU\": $DEVICES_PER_NODE}" --block
fi
