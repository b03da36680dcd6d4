"""Ray actor classes that bind engines to roles, and their placement on devices."""
