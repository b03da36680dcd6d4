"""Engines: Megatron (train / logprobs) and vLLM (rollout); mindrl/weight_sync moves weights
between them."""
