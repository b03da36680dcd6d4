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
# Ray gives the head's raylet 30 s to register with its GCS (hard-coded in Ray 2.60); on a
# loaded machine it can take longer, and `ray start` then fails ("timed out during startup")
# leaving the half-started node running: its GCS answers, but no worker can join it ("No node
# info found for head node in GCS"). Such a start is stopped (the processes of its session
# directory only) and tried again: HEAD_TRIES (3) tries in all.
HEAD_TRIES=${HEAD_TRIES:-3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for try in $(seq "$HEAD_TRIES"); do
  # Ray's messages go through a file (a pipe would be held open by the node's processes).
  if "$RAY_BIN" start "${args[@]}" 2> "$log"; then cat "$log" >&2; break; else code=$?; fi
  cat "$log" >&2
  if [ "$try" = "$HEAD_TRIES" ] || ! grep -q "timed out during startup" "$log"; then
    exit "$code"
  fi
  if [ -L "$RAY_TEMP_DIR/session_latest" ]; then     # the node this start left: its processes
    session=$(readlink -f "$RAY_TEMP_DIR/session_latest" || true)
    if [ -n "$session" ]; then
      pkill -9 -f -- "$session" || true
      for _ in $(seq 50); do      # gone before the next start takes the ports
        pgrep -f -- "$session" > /dev/null || break
        sleep 0.2
      done
    fi
  fi
  echo "the head node did not register in time (try $try of $HEAD_TRIES; the machine is" \
       "busy): its processes stopped, starting it again" >&2
  sleep 2
done
echo "head up: RAY_ADDRESS=$MASTER_ADDR:$RAY_PORT ($DEVICES_PER_NODE $RESOURCE)"
