"""The ``relay`` variant: the real worker loop around a gate that decides nothing.

The ceiling of the loop: the same ``Worker``, consumer, batches, transactions and records
(agent + audit per result, quarantine per rejection) with a precomputed verdict per result,
no parsing, no validation. It runs in the worker process (:mod:`ops.bench.worker`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from ops.bench.backlog import REJECT_EVERY, results


class RelayGate:
    """A gate that decides nothing: a precomputed verdict per result, no parse, no schema.

    The verdicts are the real gate's on the first accepted and the first rejected
    result, so the records written have the real sizes. Every tenth request id
    (ending in 9) gets the rejected one, as the backlog's rejections; an accepted one
    is a copy naming the result's own request id.
    """

    def __init__(self, real: Any, message_type: Any, verdict_type: Any) -> None:
        self.contracts = real.contracts
        from toolgate.gate._records import RequestRecord

        now = datetime.now(UTC)
        sample = list(results("relay", REJECT_EVERY, now))
        verdicts = []
        for result in (sample[0], sample[-1]):
            request = msgspec.json.decode(result.request, type=RequestRecord)
            verdicts.append(
                real.evaluate(
                    message_type(key=result.key, value=result.value, headers=result.headers), request, now
                )
            )
        self.accepted, self.rejected = verdicts
        assert self.accepted.accepted
        assert not self.rejected.accepted
        assert isinstance(self.accepted, verdict_type)

    def evaluate(self, message: Any, request: Any, now: Any, ledger: Any = None, **_: Any) -> Any:
        if message.key.endswith(b"9"):
            return self.rejected
        # An acceptance names the message's own request (the state changelog records the
        # accepted attempts of live requests, and a request must be there for that).
        return msgspec.structs.replace(self.accepted, request_id=message.key.decode())
