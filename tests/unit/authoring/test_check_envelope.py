"""toolgate check's intake record: headers and key from --header pairs, a request record and --key."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from toolgate import cli
from toolgate._errors import ConfigError
from toolgate.authoring._check import intake_envelope

from tests.unit.builders import CONTRACTS, NOW, REQUEST_ID, review_request, review_value


class TestIntakeEnvelope:
    """The offline check builds the key and headers the worker would receive."""

    def test_pairs_keep_their_order_and_repeats(self) -> None:
        """Each --header is sent as given, a repeated name twice, as Kafka carries it."""
        envelope = intake_envelope(["tg-tool=a", "x=1", "tg-tool=b"], None, None)
        assert envelope.headers == [("tg-tool", b"a"), ("x", b"1"), ("tg-tool", b"b")]
        assert envelope.key is None

    def test_request_supplies_tool_and_request_id(self) -> None:
        """With a request record, tg-tool and tg-request-id come first from it, the key from the id."""
        envelope = intake_envelope(["tg-adapter-version=1.4.2"], review_request(), None)
        assert envelope.headers == [
            ("tg-tool", b"review_status"),
            ("tg-request-id", REQUEST_ID.encode()),
            ("tg-adapter-version", b"1.4.2"),
        ]
        assert envelope.key == REQUEST_ID.encode()

    def test_a_given_header_wins_over_the_request_in_any_case(self) -> None:
        """A --header TG-Request-Id replaces the request's default, and the key follows it."""
        envelope = intake_envelope(["TG-Request-Id=other"], review_request(), None)
        assert envelope.headers == [("tg-tool", b"review_status"), ("TG-Request-Id", b"other")]
        assert envelope.key == b"other"

    def test_key_overrides_the_request_id(self) -> None:
        """--key is the Kafka key whatever tg-request-id says."""
        assert intake_envelope([], review_request(), "k-1").key == b"k-1"

    @pytest.mark.parametrize("pair", ["no-equals", "=value"])
    def test_a_pair_without_a_name_is_a_usage_error(self, pair: str) -> None:
        """A --header that is not K=V names the flag and the expected shape."""
        with pytest.raises(ConfigError, match=r"--header .*expected K=V"):
            intake_envelope([pair], None, None)

    def test_a_value_that_is_not_utf8_is_named(self) -> None:
        """A surrogate-escaped argument (not UTF-8) is refused, naming the header or --key."""
        with pytest.raises(ConfigError, match="--header tg-tool: the value is not UTF-8"):
            intake_envelope(["tg-tool=\udcff"], None, None)
        with pytest.raises(ConfigError, match="--key: the value is not UTF-8"):
            intake_envelope([], None, "\udcff")


class TestCheckCommand:
    """toolgate check sends the gate what the worker would receive, and says bad input in one line."""

    def files(self, tmp_path: Path) -> list[str]:
        request = tmp_path / "request.json"
        request.write_bytes(msgspec.json.encode(review_request()))
        result = tmp_path / "result.json"
        result.write_bytes(msgspec.json.encode(review_value()))
        return [
            "check",
            "--contracts",
            str(CONTRACTS),
            "--request",
            str(request),
            "--now",
            NOW.isoformat(),
        ], str(result)  # type: ignore[return-value]

    def test_repeated_header_reaches_the_gate(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two --header values for one name are both sent: HEADER_MISMATCH, as in the worker."""
        argv, result = self.files(tmp_path)
        version = ["--header", "tg-adapter-version=1.4.2"]
        assert cli.main([*argv, *version, result]) == 0
        capsys.readouterr()
        assert (
            cli.main(
                [
                    *argv,
                    *version,
                    "--header",
                    "tg-tool=review_status",
                    "--header",
                    "TG-Tool=job_status",
                    result,
                ]
            )
            == 1
        )
        line = json.loads(capsys.readouterr().out)
        assert (line["stage"], line["code"]) == ("contract", "HEADER_MISMATCH")

    @pytest.mark.parametrize("option", ["--header", "--key"])
    def test_non_utf8_value_is_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
    ) -> None:
        argv, result = self.files(tmp_path)
        bad = "tg-source=\udcff" if option == "--header" else "req.\udcff"
        assert cli.main([*argv, option, bad, result]) == 2
        out, err = capsys.readouterr()
        assert len(err.splitlines()) == 1
        assert "not UTF-8" in err
        assert "Traceback" not in out + err
