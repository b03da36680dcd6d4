"""Model shapes (configs/model) and their Megatron GPTModel builder."""
