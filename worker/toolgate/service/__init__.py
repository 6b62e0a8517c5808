"""The Kafka service: the transactional worker loop, its state readers, metrics and health.

Every Kafka client is built in :mod:`toolgate.service._kafka`; the loop is a thin
shell around :func:`toolgate.gate.decide_batch`.
"""

from toolgate.service._metrics import Metrics
from toolgate.service._service import Worker, WorkerOptions, WorkerStats

__all__ = ["Metrics", "Worker", "WorkerOptions", "WorkerStats"]
