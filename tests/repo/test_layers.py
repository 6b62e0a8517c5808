"""Imports point downwards: the gate is pure, the service never reaches into the tools or the CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT

PACKAGE = ROOT / "worker" / "toolgate"

# Layer (a subpackage of toolgate) -> module prefixes it must never import. Each room serves
# one kind of user (its __init__ docstring says which) and imports only downwards:
# cli -> mcp -> client -> service -> registry -> gate, mcp -> authoring -> registry, operations -> service.
_ROOMS = (
    "toolgate.authoring",
    "toolgate.mcp",
    "toolgate.operations",
    "toolgate.cli",
    "toolgate.client",
    "toolgate.registry",
)
FORBIDDEN = {
    "gate": ("aiokafka", "prometheus_client", "toolgate.service", *_ROOMS),
    "service": tuple(r for r in _ROOMS if r != "toolgate.registry"),
    "authoring": (
        "aiokafka",
        "toolgate.service",
        *(r for r in _ROOMS if r not in ("toolgate.authoring", "toolgate.registry")),
    ),
    "registry": (
        "aiokafka",
        "prometheus_client",
        "toolgate.service",
        *(r for r in _ROOMS if r != "toolgate.registry"),
    ),
    "mcp": ("toolgate.service", "toolgate.operations", "toolgate.cli"),
    "operations": ("toolgate.authoring", "toolgate.mcp", "toolgate.cli", "toolgate.client"),
    "client": ("toolgate.authoring", "toolgate.mcp", "toolgate.operations", "toolgate.cli"),
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


ROOMS = ("authoring", "mcp", "operations", "client", "registry")


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


class TestRooms:
    """The package is divided by who uses each room, and no room outgrows the house."""

    @pytest.mark.parametrize("room", sorted({*FORBIDDEN, "cli"}))
    def test_no_room_holds_more_than_a_quarter_of_the_lines(self, room: str) -> None:
        """A room over a quarter of the package's lines is a sign it serves more than one user."""
        total = sum(_lines(path) for path in PACKAGE.rglob("*.py"))
        in_room = sum(_lines(path) for path in (PACKAGE / room).rglob("*.py"))
        assert in_room <= total / 4, f"{room}: {in_room} of {total} lines"

    @pytest.mark.parametrize("room", sorted(FORBIDDEN))
    def test_each_room_says_whom_it_serves_and_what_it_may_import(self, room: str) -> None:
        """The room's __init__ docstring names its users and the rooms it must not import."""
        doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text(encoding="utf-8")))
        assert doc is not None
        assert "import" in doc
        for bad in FORBIDDEN[room]:
            if bad.startswith("toolgate."):
                assert f":mod:`{bad}`" in doc or bad == "toolgate.cli", f"{room} does not name {bad}"

    @pytest.mark.parametrize("room", ROOMS)
    def test_unit_tests_mirror_the_room(self, room: str) -> None:
        """tests/unit has a folder per room, and every test module there imports its room."""
        folder = ROOT / "tests" / "unit" / room
        tests = sorted(folder.glob("test_*.py"))
        assert tests, f"tests/unit/{room} has no tests"
        for path in tests:
            assert f"toolgate.{room}" in path.read_text(encoding="utf-8"), path.name


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules of ``sources`` it imports (``sources``: module -> (source, is
    package)); every import statement counts, in functions and ``if TYPE_CHECKING`` too."""
    known = set(sources)
    return {
        module: {name for name in imported_modules(source, module, is_package=is_package) if name in known}
        - {module}
        for module, (source, is_package) in sources.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_sources() -> dict[str, tuple[str, bool]]:
    return {
        _module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


class TestNoImportCycle:
    """No module of worker/toolgate imports, even lazily or for type checking only, a module
    that imports it back: each can be read and tested from the bottom up."""

    def test_the_package_has_no_import_cycle(self) -> None:
        """The module-level import graph of worker/toolgate has no cycle."""
        assert cycles(import_graph(package_sources())) == []

    def test_a_cycle_through_type_checking_and_a_function_is_found(self) -> None:
        """A made-up cycle, one edge under ``if TYPE_CHECKING`` and one inside a function,
        is reported; without the edge back it is not."""
        sources = {
            "toolgate.service._a": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._b import B\n",
                False,
            ),
            "toolgate.service._b": ("def f():\n    from toolgate.service import _c\n", False),
            "toolgate.service._c": ("import toolgate.service._a\n", False),
        }
        assert cycles(import_graph(sources)) == [
            ["toolgate.service._a", "toolgate.service._b", "toolgate.service._c"]
        ]
        sources["toolgate.service._c"] = ("import json\n", False)
        assert cycles(import_graph(sources)) == []

    def test_the_partition_and_the_worker_are_not_a_cycle(self) -> None:
        """Put back, the partition's import of the worker under TYPE_CHECKING makes a cycle."""
        sources = package_sources()
        source, is_package = sources["toolgate.service._partition"]
        sources["toolgate.service._partition"] = (
            source + "\nif TYPE_CHECKING:\n    from toolgate.service._service import Worker\n",
            is_package,
        )
        assert ["toolgate.service._partition", "toolgate.service._service"] in cycles(import_graph(sources))
