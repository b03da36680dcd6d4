"""Rollout: the vLLM engines as a data-parallel group (engine_group)."""
