"""The pure gate: limits, strict parse, schema, semantic rules, projection, and batch decisions.

For every other room: the worker, the MCP proxy, the authors' and operators' tools all
decide with it. It may import only the package's shared modules (``toolgate._*``): never
aiokafka or prometheus-client, :mod:`toolgate.service`, :mod:`toolgate.authoring`,
:mod:`toolgate.mcp`, :mod:`toolgate.operations`, :mod:`toolgate.registry`,
:mod:`toolgate.client` or the CLI (a test enforces it). Every stage is a function of the bytes,
the headers, the request record and an injected clock.
"""

from toolgate.gate._batch import Batch, Decision, decide_batch
from toolgate.gate._cel import RULE_KEYWORD, rejected_rule
from toolgate.gate._contracts import Contract, ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._records import Diagnostics, Message, Origin, RequestRecord, Verdict, decode_request
from toolgate.gate._signing import Keyring

__all__ = [
    "RULE_KEYWORD",
    "Batch",
    "Contract",
    "ContractSet",
    "Decision",
    "Diagnostics",
    "Gate",
    "Keyring",
    "Message",
    "Origin",
    "RequestRecord",
    "Verdict",
    "decide_batch",
    "decode_request",
    "rejected_rule",
]
