"""A run's Megatron training checkpoints (model, optimizer, RNG): save and load through
dist_checkpointing (megatron_checkpoint), the recipe each was made with (checkpoint_recipe),
vocabulary rows across a TP change (checkpoint_vocab), what loads at another layout
(layout_change) and the checks before a resume (resume_check)."""
