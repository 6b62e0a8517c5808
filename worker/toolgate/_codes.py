"""The gate's stage names and rejection codes, as types mypy checks in every module.

A verdict, a quarantine record, an audit event, a metrics label and a contract
fixture all name a stage and a code; they take them from here, so a misspelt
stage or code is a type error rather than a silent new label.
"""

from __future__ import annotations

from typing import Final, Literal, TypeGuard, get_args

Stage = Literal["limits", "parse", "contract", "schema", "correlate", "semantic", "project"]
"""The gate's stages, in the order they run (docs/design.md, Stages and codes)."""

Code = Literal[
    # limits
    "PAYLOAD_TOO_LARGE",
    # parse
    "MALFORMED_JSON",
    "DUPLICATE_KEY",
    "NUMBER_OUT_OF_RANGE",
    "NESTING_TOO_DEEP",
    "UNSUPPORTED_CONTENT_TYPE",
    "TEXT_EXTRACTION_FAILED",
    "MALFORMED_ENVELOPE",  # MCP results (toolgate.gate._mcp)
    "RESULT_NOT_COMPLETE",
    "CONFLICTING_VIEWS",
    # contract (HEADER_MISMATCH also at correlate)
    "UNKNOWN_TOOL",
    "UNKNOWN_CONTRACT_VERSION",
    "CONTRACTS_BEHIND",  # retryable: the worker's contract set is behind the group's
    "HEADER_MISMATCH",
    # schema
    "SCHEMA_VIOLATION",
    # correlate
    "UNKNOWN_REQUEST",
    "REQUEST_EXPIRED",
    "TOOL_MISMATCH",
    # semantic
    "BINDING_MISMATCH",
    "STALE_RESULT",
    "FUTURE_TIMESTAMP",
    "BAD_SIGNATURE",
    "DUPLICATE_RESULT",
    "SENSITIVE_DATA",  # a secret or personal data the contract rejects (gate/_sensitive.py)
    # any stage
    "INTERNAL_ERROR",
]
"""Every code a rejection can carry (operators see it; the agent sees ``INVALID_RESPONSE``)."""

STAGES: Final[tuple[Stage, ...]] = get_args(Stage)
CODES: Final[tuple[Code, ...]] = get_args(Code)
_STAGE_SET: Final = frozenset(STAGES)
_CODE_SET: Final = frozenset(CODES)


def is_stage(value: object) -> TypeGuard[Stage]:
    """True when ``value`` is one of :data:`STAGES`."""
    return value in _STAGE_SET


def is_code(value: object) -> TypeGuard[Code]:
    """True when ``value`` is one of :data:`CODES`."""
    return value in _CODE_SET


__all__ = ["CODES", "STAGES", "Code", "Stage", "is_code", "is_stage"]
