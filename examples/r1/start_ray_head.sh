#!/usr/bin/env bash
# Start the head node of a MindRL Ray cluster (the node that runs cli/train_grpo.py).
# The settings are the ones tests/trainer/test_grpo_e2e.py proves with two nodes on one machine.
#
#   DEVICES_PER_NODE=8 RESOURCE=NPU bash examples/r1/start_ray_head.sh
#
# RESOURCE: NPU (Ascend, a custom "NPU" resource), GPU, or CPU (logical CPU slots: a miniature).
# RAY_TEMP_DIR: Ray's session files (sockets, logs); one per cluster on a machine, and a short
#   path (unix socket names are limited to 107 bytes). OBJECT_STORE_BYTES: Ray's object store
#   (default: Ray's 30% of memory). Nothing here stops a Ray that is already running: stop your
#   own with `ray stop` first (which stops every Ray on the machine).
set -euo pipefail
MASTER_ADDR=${MASTER_ADDR:-$(hostname -I | awk '{print $1}')}
RAY_PORT=${RAY_PORT:-6379}
DEVICES_PER_NODE=${DEVICES_PER_NODE:-8}
RESOURCE=${RESOURCE:-NPU}
RAY_TEMP_DIR=${RAY_TEMP_DIR:-/tmp/ray}
DASHBOARD_PORT=${DASHBOARD_PORT:-8265}
RAY_BIN=${RAY_BIN:-ray}

args=(--head --node-ip-address "$MASTER_ADDR" --port "$RAY_PORT" --temp-dir "$RAY_TEMP_DIR"
      --dashboard-port "$DASHBOARD_PORT" --disable-usage-stats)
case "$RESOURCE" in
  NPU) args+=(--resources "{\"NPU\": $DEVICES_PER_NODE}") ;;
  GPU) args+=(--num-gpus "$DEVICES_PER_NODE") ;;
  CPU) args+=(--num-cpus "$DEVICES_PER_NODE") ;;
  *) echo "RESOURCE=$RESOURCE: use NPU, GPU or CPU" >&2; exit 2 ;;
esac
if [ -n "${OBJECT_STORE_BYTES:-}" ]; then args+=(--object-store-memory "$OBJECT_STORE_BYTES"); fi
export RAY_USAGE_STATS_ENABLED=0
"$RAY_BIN" start "${args[@]}"
echo "head up: RAY_ADDRESS=$MASTER_ADDR:$RAY_PORT ($DEVICES_PER_NODE $RESOURCE)"
