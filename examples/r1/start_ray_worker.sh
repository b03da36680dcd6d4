#!/usr/bin/env bash
# Join a MindRL Ray cluster from another node (start_ray_head.sh runs on the head first).
#
#   MASTER_ADDR=10.0.0.1 DEVICES_PER_NODE=8 RESOURCE=NPU bash examples/r1/start_ray_worker.sh
#
# BLOCK=1 (default) keeps this script in the foreground while the node is up (Ctrl-C leaves
# the node running: stop it with `ray stop`); BLOCK=0 returns once the node has joined.
# Node ports are picked free by Ray, so several nodes can share one machine (a CPU test).
set -euo pipefail
: "${MASTER_ADDR:?set MASTER_ADDR to the address of the head node}"
RAY_PORT=${RAY_PORT:-6379}
DEVICES_PER_NODE=${DEVICES_PER_NODE:-8}
RESOURCE=${RESOURCE:-NPU}
BLOCK=${BLOCK:-1}
RAY_BIN=${RAY_BIN:-ray}

args=(--address "$MASTER_ADDR:$RAY_PORT" --dashboard-agent-listen-port 0 --disable-usage-stats)
case "$RESOURCE" in
  NPU) args+=(--resources "{\"NPU\": $DEVICES_PER_NODE}") ;;
  GPU) args+=(--num-gpus "$DEVICES_PER_NODE") ;;
  CPU) args+=(--num-cpus "$DEVICES_PER_NODE") ;;
  *) echo "RESOURCE=$RESOURCE: use NPU, GPU or CPU" >&2; exit 2 ;;
esac
if [ -n "${OBJECT_STORE_BYTES:-}" ]; then args+=(--object-store-memory "$OBJECT_STORE_BYTES"); fi
if [ "$BLOCK" = "1" ]; then args+=(--block); fi
export RAY_USAGE_STATS_ENABLED=0
"$RAY_BIN" start "${args[@]}"
