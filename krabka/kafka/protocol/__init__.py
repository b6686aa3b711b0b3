"""Kafka protocol messages aiokafka lacks, written with aiokafka's own classes."""
