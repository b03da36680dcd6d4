"""Moving the actor's weights into the rollout engines (engine_fanout: one sync, every engine)."""
