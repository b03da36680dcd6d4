"""Engines: Megatron (train / logprobs), vLLM (rollout), resharding between them."""
