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


class TestTopicPrefix:
    """One setting isolates a deployment on a shared broker: TOOLGATE_TOPIC_PREFIX names every
    topic and the group, and a topic or group named on its own wins over it."""

    def test_prefix_names_every_topic_and_the_group(self) -> None:
        """Every topic is <prefix>.<role> and the group is <prefix>."""
        config = load_config(environ={"TOOLGATE_TOPIC_PREFIX": "alice"})
        assert config.topics.names() == [f"alice.{role}" for role in config.topics.__struct_fields__]
        assert config.group_id == "alice"
        assert config.topic_prefix == "alice"

    def test_a_topic_or_group_named_on_its_own_wins(self, tmp_path: Path) -> None:
        """TOOLGATE_TOPIC_INTAKE, a file's [topics] entry and TOOLGATE_GROUP_ID beat the prefix."""
        path = tmp_path / "tg.toml"
        path.write_text('[topics]\naudit = "shared.audit"\n')
        config = load_config(
            path,
            environ={
                "TOOLGATE_TOPIC_PREFIX": "bob",
                "TOOLGATE_TOPIC_INTAKE": "bob-in",
                "TOOLGATE_GROUP_ID": "workers",
            },
        )
        assert (config.topics.intake, config.topics.audit, config.topics.agent) == (
            "bob-in",
            "shared.audit",
            "bob.agent",
        )
        assert config.group_id == "workers"

    def test_prefix_in_the_file(self, tmp_path: Path) -> None:
        """topic_prefix in the TOML file works as the variable does."""
        path = tmp_path / "tg.toml"
        path.write_text('topic_prefix = "carol"\n')
        config = load_config(path, environ={})
        assert (config.topics.requests, config.group_id) == ("carol.requests", "carol")

    def test_bad_prefix_names_the_variable(self) -> None:
        """A prefix with characters Kafka refuses in topic names fails naming TOOLGATE_TOPIC_PREFIX."""
        with pytest.raises(ConfigError, match=r"^TOOLGATE_TOPIC_PREFIX='a b': a topic prefix is 1-200"):
            load_config(environ={"TOOLGATE_TOPIC_PREFIX": "a b"})

    def test_without_prefix_nothing_changes(self) -> None:
        """No prefix: the default names and group."""
        config = load_config(environ={"TOOLGATE_TOPIC_INTAKE": "x.in"})
        assert (config.topics.intake, config.topics.agent, config.group_id) == (
            "x.in",
            "toolgate.agent",
            "toolgate",
        )
