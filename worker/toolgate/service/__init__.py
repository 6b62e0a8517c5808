"""The Kafka service: the transactional worker loop, its state readers, metrics and health.

For the people who deploy and run the worker (``toolgate run``), and for the rooms above it
that need its Kafka clients. It may import :mod:`toolgate.gate` and the shared modules;
never :mod:`toolgate.authoring`, :mod:`toolgate.mcp`, :mod:`toolgate.operations`,
:mod:`toolgate.client` or the CLI. Every Kafka client is built in
:mod:`toolgate.service._kafka`; the loop is a thin shell around
:func:`toolgate.gate.decide_batch`.
"""

from toolgate.service._metrics import Metrics
from toolgate.service._service import Worker, WorkerOptions, WorkerStats

__all__ = ["Metrics", "Worker", "WorkerOptions", "WorkerStats"]
