#!/usr/bin/env bash
# Join the head's Ray cluster from a worker node (see r1_zero_qwen25_7b_master.sh).
#   MASTER_ADDR=<head address> bash examples/r1/qwen25/r1_zero_qwen25_7b_worker.sh
set -euo pipefail
export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1800}
export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-1800}
exec bash "$(cd "$(dirname "$0")" && pwd)/../start_ray_worker.sh"
