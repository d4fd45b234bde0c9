"""Replica schedulers: each step, decide which requests advance and by how many tokens."""
