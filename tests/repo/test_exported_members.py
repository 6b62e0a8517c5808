"""The public in-process API: ``toolgate.__all__`` is frozen, sorted and every name resolves."""

from __future__ import annotations

import toolgate

# Changing the public API is a decision: update this list in the same change.
EXPORTED = [
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


class TestExportedMembers:
    """What ``import toolgate`` offers is exactly the frozen list."""

    def test_all_is_frozen(self) -> None:
        """``__all__`` lists exactly the public names above."""
        assert toolgate.__all__ == EXPORTED

    def test_all_is_sorted(self) -> None:
        """``__all__`` is kept in sorted order, so a diff shows what changed."""
        assert toolgate.__all__ == sorted(toolgate.__all__)

    def test_every_name_resolves(self) -> None:
        """Every exported name is an attribute of the package."""
        missing = [name for name in toolgate.__all__ if not hasattr(toolgate, name)]
        assert missing == []

    def test_public_names_are_exported(self) -> None:
        """Every public object the package holds (not a submodule) is in ``__all__``."""
        public = {
            name
            for name, value in vars(toolgate).items()
            if not name.startswith("_") and type(value).__name__ != "module"
        }
        assert public - set(toolgate.__all__) == set()
