"""CPU-only machinery (PLATFORM_NOTES): what the CPU builds of Megatron and vLLM need."""
