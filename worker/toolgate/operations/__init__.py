"""For operators of a running deployment: replay, quarantine, top, topics grow, ACLs, Strimzi, demo traffic.

What an SRE runs against a live cluster: ``toolgate replay``, ``quarantine``, ``top``,
``topics grow``, ``acls``, the Strimzi manifests and ``toolgate demo``'s sample traffic. It
may import :mod:`toolgate.gate`, :mod:`toolgate.service` (its Kafka clients and state
readers) and the shared modules; never :mod:`toolgate.authoring`, :mod:`toolgate.mcp`,
:mod:`toolgate.client` or the CLI.
"""
