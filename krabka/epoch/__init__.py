"""Epoch mode: the candidate and tenure of a role whose token is the producer
epoch Kafka's transaction coordinator mints. Imports nothing of `krabka.term`."""
