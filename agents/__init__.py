"""Faust agents and the role runners of the worker application.

`agents.folding` is the pure fold of one ``__coordination_state`` record into
a role's table value, with the leadership-change events it causes
(`agents.events`); `agents.fold` is the Faust agent that runs it (and the
lapse ticks). `agents.roles` has the role registry an installation declares into and the
`RoleRunner` (one candidate per role per worker), `agents.service` the
Faust service that runs them and resigns on shutdown.
"""
