"""toolgate: validate AI-agent tool results before an agent may act on them.

The in-process API is the pure gate: bytes, headers, the correlated request and a
clock in, a :class:`Verdict` out. Nothing here talks to Kafka; the Kafka worker is
:mod:`toolgate.service`; contract authors' tools are in :mod:`toolgate.authoring`, the MCP
face in :mod:`toolgate.mcp` and operators' tools in :mod:`toolgate.operations`.

Example::

    from datetime import UTC, datetime
    import toolgate

    gate = toolgate.Gate(toolgate.ContractSet.load("contracts"))
    verdict = gate.evaluate(message, request, datetime.now(UTC))

:mod:`toolgate.client` is the Kafka side for platforms and adapters: issue a request,
publish a result, await the decided answer.
"""

from toolgate._config import Config, load_config
from toolgate._errors import BrokerError, ConfigError, ContractError, RejectedInput, ToolgateError
from toolgate._version import __version__
from toolgate.gate import (
    Batch,
    Contract,
    ContractSet,
    Decision,
    Diagnostics,
    Gate,
    Keyring,
    Message,
    RequestRecord,
    Verdict,
    decide_batch,
    decode_request,
)

__all__ = [
    "Batch",
    "BrokerError",
    "Config",
    "ConfigError",
    "Contract",
    "ContractError",
    "ContractSet",
    "Decision",
    "Diagnostics",
    "Gate",
    "Keyring",
    "Message",
    "RejectedInput",
    "RequestRecord",
    "ToolgateError",
    "Verdict",
    "__version__",
    "client",
    "decide_batch",
    "decode_request",
    "load_config",
]


def __getattr__(name: str) -> object:
    """``toolgate.client`` (the Kafka client for platforms and adapters) loads on first use:
    ``import toolgate`` alone stays free of Kafka."""
    if name == "client":
        import importlib

        return importlib.import_module("toolgate.client")
    raise AttributeError(f"module 'toolgate' has no attribute {name!r}")
