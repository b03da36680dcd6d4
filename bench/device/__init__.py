"""Acceptance checks and device runs, apart from the benchmarks: check_device (thresholds, exit
1 on a figure out of bounds), gpu_run.sh (the one-shot accelerator run), bench_device_ipc and its
receiver process ipc_receiver (the device-bucket weight transport)."""
