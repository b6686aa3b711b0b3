"""The Faust tables of the worker application: `tables.faust_tables` declares the
two changelog-backed tables, ``role_state`` (one value per role) and
``partition_state`` (per state partition: records no role owns), whose values
and codecs are the fold's (`agents.fold.role_value`, `agents.fold.partition_value`).

The name shadows PyTables' ``tables``: run the service in its own virtualenv.
"""
