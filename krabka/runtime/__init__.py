"""How the library runs inside its user's process: stopping child tasks without
losing a cancellation, calling user callbacks, the dependency-version check."""
