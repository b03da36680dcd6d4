"""HF <-> Megatron-core checkpoints. mapping.py is the only code that knows the names."""
