#!/usr/bin/env bash
# R1-Zero GRPO on Qwen2.5-7B across nodes: run this on the head node, then
# r1_zero_qwen25_7b_worker.sh on every other node; training starts here once all devices have
# joined. Paths and sizes are in configs/rlxf/r1_zero_qwen25_7b.yaml; extra arguments are
# Hydra overrides for cli/train_grpo.py. Node settings: examples/r1/start_ray_head.sh.
set -euo pipefail
export MASTER_ADDR=${MASTER_ADDR:-$(hostname -I | awk '{print $1}')}
export RAY_PORT=${RAY_PORT:-6379}
NNODES=${NNODES:-2}
export DEVICES_PER_NODE=${DEVICES_PER_NODE:-8}
export RESOURCE=${RESOURCE:-NPU}          # NPU (Ascend), GPU, or CPU (a miniature)
CONFIG=${CONFIG:-r1_zero_qwen25_7b}
PYTHON=${PYTHON:-python}

# Collective-communication settings (see docs/guides/many-nodes.md).
export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1800}
export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-1800}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-}
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-}
export HCCL_SOCKET_IFNAME=${HCCL_SOCKET_IFNAME:-}

here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
bash "$here/../start_ray_head.sh"
export RAY_ADDRESS="$MASTER_ADDR:$RAY_PORT"

want=$((NNODES * DEVICES_PER_NODE))
echo "waiting for $want ${RESOURCE}s from $NNODES nodes..."
until "$PYTHON" - "$RESOURCE" "$want" "$NNODES" <<'PY'
import sys, ray
ray.init(logging_level="ERROR")
have = ray.cluster_resources().get(sys.argv[1], 0)
nodes = sum(1 for n in ray.nodes() if n["Alive"])
ray.shutdown()
sys.exit(0 if have >= int(sys.argv[2]) and nodes >= int(sys.argv[3]) else 1)
PY
do sleep 5; done

"${RAY_BIN:-ray}" status
# The plan against the live cluster: which node each rank and engine lands on.
"$PYTHON" cli/train_grpo.py --config-name "$CONFIG" +dry_run=true "$@"
"$PYTHON" cli/train_grpo.py --config-name "$CONFIG" "$@"
