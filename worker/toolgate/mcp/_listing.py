"""The upstream's ``tools/list`` as ``toolgate mcp-proxy`` reads and judges it: every page
within the proxy's bounds (:func:`read_listing`), the members of a live definition that
differ from the pinned one (:func:`changed_members`), and the ``Tool`` the host is shown
(:func:`listed_tool`: the contract's pinned definition and nothing else).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from toolgate._errors import ConfigError
from toolgate.authoring._texts import served_schema
from toolgate.gate._contracts import Contract
from toolgate.mcp import _wire
from toolgate.mcp._advertise import advertised_input_schema, advertised_output_schema
from toolgate.mcp._upstream import raw_exchange

# The bounds of one reading of the upstream's tools/list: a listing over any of them is
# not read (start-up stops; later, every tool is withdrawn until a listing can be read).
MAX_LISTED_TOOLS = 10_000
MAX_LISTING_PAGES = 100
MAX_LISTING_BYTES = 8 * 1024 * 1024
# Compared on their own above, or not part of the digest: never named among the others.
_NEVER_A_CHANGE = frozenset({"name", "_meta", "inputSchema", "outputSchema"})
# Members of an MCP Tool a change report may name (others are "another member").
_TOOL_MEMBERS = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "icons",
    "execution",
)


class ListingError(ConfigError):
    """The upstream's ``tools/list`` could not be read within the proxy's bounds."""


def task_required(tool: Mapping[str, Any]) -> bool:
    """Whether a listed tool runs only as a task (``execution.taskSupport: "required"``): its
    ``tools/call`` answers a task, never a result, and the proxy does not drive tasks."""
    execution = tool.get("execution")
    return isinstance(execution, dict) and execution.get("taskSupport") == "required"


def changed_members(contract: Contract, live: Mapping[str, Any]) -> list[str]:
    """The members of the live definition that differ from the pinned one (by name only),
    each compared as the upstream sent it with what import pinned of it as it came (the
    upstream part of a closed schema, not the closed schema); or the live members the
    contract does not pin when those are what changed."""
    definition = contract.spec.mcp.definition if contract.spec.mcp else None
    if definition is None:
        return []
    annotations = msgspec.to_builtins(definition.annotations) if definition.annotations else None
    pinned = {"title": definition.title, "description": definition.description, "annotations": annotations}
    differ = [name for name, value in pinned.items() if live.get(name) != value]
    pinned_input = _upstream_part(contract.input_schema)
    if pinned_input is None and isinstance(contract.input_schema, dict):
        pinned_input = {k: v for k, v in contract.input_schema.items() if k not in ("$schema", "$id")}
    if not _same_schema(pinned_input, live.get("inputSchema")):
        differ.append("inputSchema")
    if not _same_schema(_upstream_part(contract.schema), live.get("outputSchema")):
        differ.append("outputSchema")
    if differ:
        return sorted(differ, key=_TOOL_MEMBERS.index)
    # Only then the members the contract does not pin (an unchanged _meta, name or schema is
    # left out before any name is generalised: it is no change).
    unpinned = [name for name in live if name not in pinned and name not in _NEVER_A_CHANGE]
    others = sorted({name if name in _TOOL_MEMBERS else "another member" for name in unpinned})
    return others or ["the definition"]


def _upstream_part(schema: Any) -> dict[str, Any] | None:
    """The upstream's own schema inside a schema import closed (``$id`` urn:toolgate:upstream:...),
    or a hand-written input schema itself; None when there is none (no outputSchema)."""
    from toolgate.authoring._close import UPSTREAM_ID

    stack, budget = [schema], 100_000
    while stack and budget:
        budget -= 1
        node = stack.pop()
        if isinstance(node, dict):
            if str(node.get("$id", "")).startswith(UPSTREAM_ID):
                return {k: v for k, v in node.items() if k != "$id"}
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _same_schema(pinned: dict[str, Any] | None, live: Any) -> bool:
    """Whether a live schema is the one import pinned (as it came, but its dialect and id,
    and the ``additionalProperties: false`` import adds to a schema that takes nothing)."""
    if pinned is None or not isinstance(live, dict):
        return pinned is None and live is None
    bare = {k: v for k, v in live.items() if k not in ("$schema", "$id")}
    return pinned == bare or pinned == {**bare, "additionalProperties": False}


def listed_tool(contract: Contract) -> Any:
    """The ``Tool`` the host is shown: the contract's pinned definition and nothing else."""
    import mcp.types as types

    mcp = contract.spec.mcp
    assert mcp is not None
    assert mcp.definition is not None
    definition = mcp.definition
    annotations = (
        types.ToolAnnotations.model_validate(msgspec.to_builtins(definition.annotations))
        if definition.annotations is not None
        else None
    )
    return types.Tool(
        name=mcp.tool,
        title=definition.title,
        description=definition.description,
        # Flat and closed (Ajv compiles it, hosts type arguments from its properties), with only
        # JSON Schema keywords: what lint listed is what the host is served.
        input_schema=served_schema(advertised_input_schema(contract)),
        output_schema=advertised_output_schema(contract),
        annotations=annotations,
    )


async def read_listing(session: Any) -> list[dict[str, Any]]:
    """Every page of the upstream's ``tools/list`` over ``session`` (the upstream's client
    session), each tool as it came on the wire, within :data:`MAX_LISTING_PAGES` pages,
    :data:`MAX_LISTED_TOOLS` tools and :data:`MAX_LISTING_BYTES` bytes.

    Raises:
        ListingError: the listing is an error, not a listing, or over a bound (named).
    """
    import mcp.types as types
    from mcp.shared.exceptions import MCPError

    listed: list[dict[str, Any]] = []
    cursor: str | None = None
    size = 0
    for _ in range(MAX_LISTING_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        try:
            page, body = await raw_exchange(session, types.ListToolsRequest(params=params))
        except MCPError as exc:  # the upstream's text stays here
            if exc.code == _wire.OVERSIZED:
                raise ListingError(f"tools/list: a page over {MAX_LISTING_BYTES} bytes") from None
            raise ListingError(f"tools/list answered a JSON-RPC error (code {exc.code})") from None
        except TypeError:
            raise ListingError("tools/list answered a result that is not a JSON object") from None
        size += len(body) if body is not None else len(json.dumps(page, ensure_ascii=False))
        if size > MAX_LISTING_BYTES:
            raise ListingError(f"tools/list: the listing is over {MAX_LISTING_BYTES} bytes")
        tools = page.get("tools")
        if not isinstance(tools, list):
            raise ListingError("tools/list answered without a tools array")
        if len(listed) + len(tools) > MAX_LISTED_TOOLS:
            raise ListingError(f"tools/list lists more than {MAX_LISTED_TOOLS} tools")
        listed.extend(t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))
        next_cursor = page.get("nextCursor")
        if not isinstance(next_cursor, str) or not next_cursor:
            return listed
        cursor = next_cursor
    raise ListingError(f"tools/list still pages after {MAX_LISTING_PAGES} pages")
