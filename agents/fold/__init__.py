"""The fold: one ``__coordination_state`` record (or term record) folded into a
role's table value, with the leadership events it causes.

`agents.fold.rules` is the pure fold; `agents.fold.role_value` and
`agents.fold.partition_value` are the values it folds into and their orjson
codecs; `agents.fold.due` indexes when each value next has a lapse to report;
`agents.fold.agent` is the Faust agent that runs the fold and the lapse ticks.
"""
