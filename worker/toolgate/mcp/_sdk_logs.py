"""The MCP SDK's own log records, kept from quoting the upstream's values.

The SDK logs what it cannot read from the upstream with the exception attached: a malformed
``notifications/progress`` is a pydantic ``ValidationError`` whose text and traceback quote
the values the upstream sent (``input_value='SYSTEM: ...'``), on the proxy's stderr and
in its logs. :func:`quiet` puts :class:`NoUpstreamValues` on the SDK's loggers: each record
keeps its template with every argument masked, and an exception becomes its type alone.
"""

from __future__ import annotations

import logging
import re
from typing import Final

# The SDK's loggers: its modules' (mcp.*) and the client session's, named "client".
SDK_LOGGERS: Final = ("mcp", "client")
_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[diouxXeEfFgGcrsa%]")
MASK: Final = "<masked>"


class NoUpstreamValues(logging.Filter):
    """Rewrites a record to its template, arguments masked, an exception as its type only."""

    def filter(self, record: logging.LogRecord) -> bool:
        template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
        if record.args:
            template = _PLACEHOLDER.sub(lambda m: "%" if m.group() == "%%" else MASK, template)
        if record.exc_info and record.exc_info[0] is not None:
            template += f" ({record.exc_info[0].__name__}; the upstream's values are not shown)"
        record.msg, record.args = template, None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


_FILTER: Final = NoUpstreamValues()


def _sdk_logger(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in SDK_LOGGERS)


def quiet() -> None:
    """Put :class:`NoUpstreamValues` on every SDK logger that exists (import the SDK first:
    its modules create their loggers at import)."""
    import mcp.client.session
    import mcp.shared.jsonrpc_dispatcher  # noqa: F401

    names = [name for name in logging.root.manager.loggerDict if _sdk_logger(name)]
    for name in [*SDK_LOGGERS, *names]:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


__all__ = ["MASK", "SDK_LOGGERS", "NoUpstreamValues", "quiet"]
