"""Epoch mode's pure rules: a role's state, the fold of its records, and what a
member does next. Nothing here does I/O; term mode reuses the ranking rules."""
