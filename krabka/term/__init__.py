"""Term mode, for services without transactions: terms claimed on
``__coordination_terms``, heartbeats, the reader's filter. Imports nothing of
`krabka.epoch`."""
