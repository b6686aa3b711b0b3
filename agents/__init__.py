"""Faust agents and the role runners of the worker application.

`agents.fold` is the fold of one ``__coordination_state`` record into a role's
table value, with the leadership-change events it causes (`agents.events`): its
rules, values, due index and Faust agent. `agents.roles` has the role registry
an installation declares into and the `RoleRunner` (one candidate per role per
worker), `agents.service` the Faust service that runs them and resigns on
shutdown, `agents.rebalancing` the hand-over of roles between workers and
`agents.peers` the requests to another worker. `agents.context` is what the
composition root hands them: they import nothing of `app`.
"""
