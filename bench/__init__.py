"""Benchmarks side by side with etcd and ZooKeeper elections.

Not built yet; see the benchmarks issue.
"""
