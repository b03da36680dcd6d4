"""What the benches share, so that no bench script imports another: the FLOP model and KV-cache
size (flops), GEMM rates (gemm), the machine a figure was measured on (machine), natural-length
batches and the one-rank update engine (batches), the end-to-end shapes (shapes), MindRL run at
a shape through its CLI (mindrl_runs), a run's step rows summed up (steps), and the final JSON
line with its result file (results: `python -m bench.common.results` prints the newest line of
every bench)."""
