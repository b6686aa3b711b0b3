"""Faust tables of the worker application and their orjson value codecs.

`tables.role_state` (one value per role: the library's `RoleState` and the
fold agent's bookkeeping) and `tables.partition_state` (per state partition: records no role
owns) are the codecs; `tables.role_view` renders the JSON shapes of the web
view; `tables.faust_tables` declares the two changelog-backed tables.

The name shadows PyTables' ``tables``: run the service in its own virtualenv.
"""
