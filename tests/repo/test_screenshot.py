"""`make screenshot` (ops/screenshot/drift.py): the drifting adapter it simulates, the graphs it asks
Prometheus for, and the committed picture the operations guide shows."""

from __future__ import annotations

import importlib.util
import shutil
import struct
import subprocess
import urllib.parse
from datetime import UTC, datetime

import pytest
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._records import RequestRecord, decode_request
from toolgate.gate._signing import Keyring
from toolgate.operations._traffic import TrafficGenerator

from tests import ROOT
from tests.ops_catalog import alerts

_spec = importlib.util.spec_from_file_location("drift", ROOT / "ops" / "screenshot" / "drift.py")
assert _spec is not None
assert _spec.loader is not None
drift = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drift)

PNG = ROOT / "docs" / "drift-graphs.png"
KEYRING = ROOT / "contracts" / "fixtures-keyring.toml"


class TestDriftingAdapter:
    """The simulated drift is a schema drift of one adapter version, correctly signed."""

    def test_drifted_result_is_a_schema_violation_of_deploy_status(self) -> None:
        """Adapter 3.2.0's capitalised state fails the schema at /data/state, not the signature."""
        keyring = Keyring.load(KEYRING, environ={})
        generator = TrafficGenerator(keyring, seed=1, run_id="shot")
        now = datetime.now(UTC)
        sample = drift.drifted(generator, now)
        request: RequestRecord = decode_request(sample.request_bytes() or b"")
        verdict = Gate(ContractSet.load(ROOT / "contracts"), keyring).evaluate(sample.message, request, now)
        headers = dict(sample.message.headers)
        assert headers["tg-adapter-version"] == b"3.2.0"
        assert (verdict.tool, verdict.stage, verdict.code) == ("deploy_status", "schema", "SCHEMA_VIOLATION")
        assert verdict.diagnostics is not None
        assert verdict.diagnostics.instance_path == "/data/state"

    def test_the_same_result_before_the_drift_is_accepted(self) -> None:
        """The healthy deploy result it is made from is accepted: only the drift is rejected."""
        keyring = Keyring.load(KEYRING, environ={})
        generator = TrafficGenerator(keyring, seed=1, run_id="shot")
        now = datetime.now(UTC)
        sample = generator.kinds["deploy.healthy"](now)
        request = decode_request(sample.request_bytes() or b"")
        assert (
            Gate(ContractSet.load(ROOT / "contracts"), keyring)
            .evaluate(sample.message, request, now)
            .accepted
        )


class TestGraphs:
    """The page shows the drift alert's own ratio and the rejections by code."""

    def test_graph_page_has_both_panels(self) -> None:
        """Panel 0 is the recording rule the drift alert reads; panel 1 rejections by code; Graph tab."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(drift.graph_url(9090, 5)).query)
        assert query["g0.expr"] == [drift.RATIO]
        assert query["g1.expr"] == ["sum by (code) (rate(toolgate_rejections_total[1m]))"]
        assert query["g0.tab"] == query["g1.tab"] == ["0"]
        assert query["g0.range_input"] == ["5m"]
        (rule,) = [a for a in alerts() if a["alert"] == "ToolgateRejectionRatioHigh"]
        assert drift.RATIO in rule["expr"]

    def test_the_committed_picture(self) -> None:
        """docs/drift-graphs.png is a PNG of the page (1280 wide) and docs/operations.md shows it."""
        data = PNG.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])
        assert width == 1280
        assert height >= 1000
        guide = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
        assert "](drift-graphs.png)" in guide
        assert "make screenshot" in guide

    def test_make_screenshot_installs_chromium_only_when_missing(self) -> None:
        """The target installs Debian's chromium when it is not on PATH, then runs the script."""
        make = shutil.which("make")
        if make is None:
            pytest.skip("make is not installed")
        plan = subprocess.run(
            [make, "-n", "--no-print-directory", "-C", str(ROOT), "screenshot"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert "command -v chromium" in plan
        assert "apt-get install -y --no-install-recommends chromium" in plan
        assert "ops/screenshot/drift.py --out docs/drift-graphs.png" in plan
        assert "kafka.sh ensure" in plan
        test_plan = subprocess.run(
            [make, "-n", "--no-print-directory", "-C", str(ROOT), "test"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert "chromium" not in test_plan  # make test does not need it
