"""Deterministic simulation of the worker loop over the in-memory Kafka (tests/fakes/kafka.py).

``python -m tests.simulation`` (``make simulate``) runs schedules, each one seed; see
docs/simulation.md for what a schedule injects, what it checks and how to replay one.
"""
