"""The frozen wire formats, pure: record keys and values of both topics, fencing
tokens, and the partition a role lives on. Nothing here does I/O or keeps time."""
