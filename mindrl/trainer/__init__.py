"""The GRPO driver: loop, metrics, tracking, checkpoints, artifact preparation."""
