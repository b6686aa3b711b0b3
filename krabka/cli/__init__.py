"""The operator CLI, ``krabka`` (also ``python -m krabka``)."""
