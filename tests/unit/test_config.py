"""Configuration from defaults, a TOML file and TOOLGATE_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from toolgate._config import load_config
from toolgate._errors import ConfigError


class TestConfig:
    def test_defaults(self) -> None:
        """With nothing set, the local broker and the default topic names apply."""
        config = load_config(environ={})
        assert config.bootstrap == "127.0.0.1:19092"
        assert config.topics.intake == "toolgate.intake"

    def test_environment_overrides_file(self, tmp_path: Path) -> None:
        """TOOLGATE_* variables win over the TOML file, which wins over defaults."""
        path = tmp_path / "tg.toml"
        path.write_text('bootstrap = "file:9092"\n[topics]\nintake = "from.file"\n')
        config = load_config(
            path, environ={"TOOLGATE_BOOTSTRAP": "env:9092", "TOOLGATE_PARTITIONS_INTAKE": "6"}
        )
        assert (config.bootstrap, config.topics.intake, config.partitions.intake) == (
            "env:9092",
            "from.file",
            6,
        )

    def test_unknown_key_names_file_and_path(self, tmp_path: Path) -> None:
        """An unknown key fails naming the file and the path."""
        path = tmp_path / "tg.toml"
        path.write_text("[topics]\nintak = 'x'\n")
        with pytest.raises(ConfigError, match=r"tg.toml.*intak.*topics"):
            load_config(path, environ={})

    def test_bad_environment_value(self) -> None:
        """A TOOLGATE_* value of the wrong type fails naming the variable, its value and the field."""
        with pytest.raises(
            ConfigError, match=r"^TOOLGATE_METRICS_PORT='lots' \(metrics_port\): Expected `int`"
        ):
            load_config(environ={"TOOLGATE_METRICS_PORT": "lots"})

    def test_broker_script_knobs_are_not_configuration(self) -> None:
        """ops/kafka/kafka.sh's TOOLGATE_KAFKA_* knobs may be set where toolgate runs."""
        config = load_config(
            environ={
                "TOOLGATE_KAFKA_PORT": "29092",
                "TOOLGATE_KAFKA_HEAP": "1g",
                "TOOLGATE_BOOTSTRAP": "127.0.0.1:29092",
            }
        )
        assert config.bootstrap == "127.0.0.1:29092"

    def test_secrets_masked(self) -> None:
        """The start-up print of the configuration masks the SASL password."""
        config = load_config(environ={"TOOLGATE_SECURITY_SASL_PASSWORD": "hunter2"})
        assert config.security.sasl_password == "hunter2"
        assert "hunter2" not in str(config.masked())
