"""Faust agents: the fold of ``__coordination_state`` and the role runners.

Not built yet; see ``app``.
"""
