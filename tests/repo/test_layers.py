"""Imports point downwards: the gate is pure, the service never reaches into the tools or the CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT

PACKAGE = ROOT / "worker" / "toolgate"

# Layer (a subpackage of toolgate) -> module prefixes it must never import.
FORBIDDEN = {
    "gate": ("aiokafka", "prometheus_client", "toolgate.service", "toolgate.tools", "toolgate.cli"),
    "service": ("toolgate.tools", "toolgate.cli"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module an import statement of ``source`` names, relative imports resolved.

    ``from a import b`` yields ``a`` and ``a.b`` (b may be a submodule); imports inside
    functions and ``if TYPE_CHECKING`` blocks count too.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def violations(layer: str) -> list[str]:
    """``file: module`` for every forbidden import of a layer's source files."""
    out = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        module = _module_name(path)
        names = imported_modules(
            path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"
        )
        for name in sorted(names):
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[layer]):
                out.append(f"{path.relative_to(PACKAGE.parent)}: {name}")
    return out


class TestImportDirection:
    """Read from the source with ast, so an import hidden in a function is caught too."""

    @pytest.mark.parametrize("layer", sorted(FORBIDDEN))
    def test_layer_imports_nothing_forbidden(self, layer: str) -> None:
        """No source file of the layer imports a module its layer must not depend on."""
        assert (PACKAGE / layer / "__init__.py").is_file()
        assert violations(layer) == []

    def test_the_check_sees_every_kind_of_import(self) -> None:
        """Plain, from, relative and function-local imports are all found."""
        source = (
            "import aiokafka.admin\n"
            "from prometheus_client import Counter\n"
            "from ..service import _kafka\n"
            "def f():\n"
            "    from toolgate import cli\n"
        )
        names = imported_modules(source, "toolgate.gate._gate")
        assert {"aiokafka.admin", "prometheus_client", "toolgate.service._kafka", "toolgate.cli"} <= names

    def test_relative_import_in_a_package_init(self) -> None:
        """In an ``__init__``, ``from ._x import y`` resolves inside the package itself."""
        assert "toolgate.gate._gate" in imported_modules(
            "from ._gate import Gate\n", "toolgate.gate", is_package=True
        )


class TestImportedAtRunTime:
    """What the interpreter actually loads agrees with the source check."""

    @pytest.mark.parametrize("module", ["toolgate", "toolgate.gate"])
    def test_gate_leaves_kafka_and_prometheus_unloaded(self, module: str) -> None:
        """Importing the package or its gate loads neither aiokafka nor prometheus_client."""
        code = (
            f"import sys, {module}\n"
            "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'aiokafka', 'prometheus_client'})\n"
            "print(','.join(loaded) or 'none')\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        assert out.strip() == "none"

    def test_the_run_time_check_can_fail(self) -> None:
        """The same probe reports aiokafka once the service is imported."""
        code = "import sys, toolgate.service\nprint('aiokafka' in sys.modules)\n"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        assert out.strip() == "True"
