"""HF <-> Megatron-core checkpoints. mapping/ is the only code that knows the names."""
