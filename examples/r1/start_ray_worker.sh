#!/usr/bin/env bash
# Join a MindRL Ray cluster from another node (start_ray_head.sh runs on the head first).
#
#   MASTER_ADDR=10.0.0.1 DEVICES_PER_NODE=8 RESOURCE=NPU bash examples/r1/start_ray_worker.sh
#
# BLOCK=1 (default) keeps this script in the foreground while the node is up (Ctrl-C leaves
# the node running: stop it with `ray stop`); BLOCK=0 returns once the node has joined.
# Node ports are picked free by Ray, so several nodes can share one machine (a CPU test). A
# join that fails at once (the head still starting) is retried: JOIN_TRIES (5) tries, 5 s apart.
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
# The head's GCS answers before the head's own node has registered in it, and a join then
# fails at once ("No node info found for head node in GCS"; seen on a loaded 2-core box right
# after start_ray_head.sh). A join that fails within a minute is tried again, JOIN_TRIES times.
JOIN_TRIES=${JOIN_TRIES:-5}
for try in $(seq "$JOIN_TRIES"); do
  started=$SECONDS
  if "$RAY_BIN" start "${args[@]}"; then exit 0; else code=$?; fi
  if [ $((SECONDS - started)) -ge 60 ] || [ "$try" = "$JOIN_TRIES" ]; then exit "$code"; fi
  echo "joining $MASTER_ADDR:$RAY_PORT failed (try $try of $JOIN_TRIES; the head may still be" \
       "starting): trying again in 5 s" >&2
  sleep 5
done
