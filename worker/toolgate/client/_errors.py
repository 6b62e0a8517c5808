"""The client's own errors (a broker's failure is toolgate's ``BrokerError``)."""

from __future__ import annotations

from toolgate._errors import ToolgateError


class AnswerTimeout(ToolgateError):
    """No decided envelope arrived for the request's attempt within its deadline."""

    def __init__(self, request_id: str, attempt: int, waited_s: float) -> None:
        self.request_id = request_id
        self.attempt = attempt
        self.waited_s = waited_s
        super().__init__(
            f"no answer for request {request_id} (attempt {attempt}) within {waited_s:.1f} s: "
            "no result was decided for it (is a worker running, did the adapter publish?)"
        )


class ClientClosed(ToolgateError):
    """The client was closed while the request still waited."""
