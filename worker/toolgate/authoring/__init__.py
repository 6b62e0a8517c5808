"""For contract authors: lint, closing a schema, schema and contract diffs, fixtures, offline check.

What a person runs while writing and reviewing ``contracts/``: ``toolgate contracts lint``,
``diff``, ``history``, ``test`` and ``toolgate check``. It may import :mod:`toolgate.gate`
and the package's shared modules (``toolgate._*``); never :mod:`toolgate.service`,
:mod:`toolgate.mcp`, :mod:`toolgate.operations`, :mod:`toolgate.client` or the CLI, and
nothing that talks to Kafka.
"""
