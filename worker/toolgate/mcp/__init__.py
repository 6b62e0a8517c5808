"""For MCP integrators: the Model Context Protocol face of toolgate in one place.

``toolgate contracts import-mcp`` (a draft contract per upstream tool) and ``toolgate
mcp-proxy`` (an MCP server that answers from the gate's decisions alone). It may import
:mod:`toolgate.gate`, :mod:`toolgate.authoring`, :mod:`toolgate.client` and the shared
modules; never :mod:`toolgate.service` directly, :mod:`toolgate.operations` or the CLI.
"""
