"""``toolgate run`` for the chaos test, with each transaction held open before its commit.

A worker commits a batch a few milliseconds after its records reach the log (one batch per
partition, then the offsets, then the commit), so a kill aimed at "records written, not
committed yet" would mostly land after the commit, and the check that no aborted record is
ever read ``read_committed`` would have nothing to look at. This launcher runs the real CLI
and worker, with one change at the Kafka seam: the transactional producer waits
``CHAOS_HOLD_COMMIT_MS`` before each commit, so the chaos kit's kill, sent when it
sees a batch's records, lands inside the transaction. Nothing else differs.

    python -m tests.integration.chaos_worker run [toolgate run's options]
"""

from __future__ import annotations

import asyncio
import os
import sys

from aiokafka import AIOKafkaProducer
from toolgate.service import _kafka

HOLD_S = int(os.environ.get("CHAOS_HOLD_COMMIT_MS", "0")) / 1000


class HeldCommitProducer(AIOKafkaProducer):  # type: ignore[misc]
    """aiokafka's producer; a transaction's commit waits ``HOLD_S`` first."""

    async def commit_transaction(self) -> None:
        await asyncio.sleep(HOLD_S)  # a fault injected on purpose: the window to be killed in
        await super().commit_transaction()


def main() -> None:
    _kafka.AIOKafkaProducer = HeldCommitProducer  # type: ignore[attr-defined]  # the seam builds producers from it
    from toolgate.cli import main as toolgate_main

    sys.exit(toolgate_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
