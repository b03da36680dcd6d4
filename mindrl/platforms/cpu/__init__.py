"""CPU-only machinery (docs/platforms.md#cpu): what the CPU builds of Megatron and vLLM need."""
