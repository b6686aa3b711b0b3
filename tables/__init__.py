"""Faust tables: ``role_state`` and its orjson value codec.

Not built yet; see ``app``. The name shadows PyTables' ``tables``: run the
service in its own virtualenv.
"""
