"""MindRL: GRPO post-training on Megatron-core, vLLM rollouts and Ray placement."""

__version__ = "0.1.0"
