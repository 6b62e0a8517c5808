"""toolgate: validate AI-agent tool results before an agent may act on them."""

from worker._version import __version__

__all__ = ["__version__"]
