"""The error tree of toolgate.

::

    ToolgateError
    ├── ConfigError            bad configuration: fail at start-up, naming file and path
    │   ├── ContractError      a contract file or schema is wrong (file + path of the mistake)
    │   └── ContractTrustError a published contract version is not what its publisher signed
    ├── RejectedInput          bad data: expected, counted, quarantined (carries stage, code, paths)
    └── BrokerError            the broker misbehaved (``retriable`` as aiokafka's KafkaError)

Bad data never escapes the gate as an exception: ``RejectedInput`` is raised
inside a stage and turned into a verdict by the gate itself.
"""

from __future__ import annotations

from toolgate._codes import Code, Stage


class ToolgateError(Exception):
    """Base of every error toolgate raises on purpose."""


class ConfigError(ToolgateError):
    """Configuration that cannot be used; the message names the file or variable and path."""


class ContractError(ConfigError):
    """A contract that cannot be loaded; the message names the file and the path of the mistake."""

    def __init__(self, file: str, path: str, message: str) -> None:
        self.file = file
        self.path = path
        super().__init__(f"{file}: {message}" + (f" - at `{path}`" if path else ""))


class ContractTrustError(ConfigError):
    """A published contract version (or set marker) that its publisher did not sign as it is:
    unknown publisher, bad signature or digest mismatch. The message names the tool, the
    version and the reason."""

    def __init__(self, tool: str, version: str, reason: str) -> None:
        self.tool = tool
        self.version = version
        self.reason = reason
        super().__init__(f"contract {tool} version {version}: {reason}")


class RejectedInput(ToolgateError):
    """A tool result rejected by one stage of the gate."""

    def __init__(
        self,
        stage: Stage,
        code: Code,
        detail: str = "",
        *,
        instance_path: str = "",
        schema_path: str = "",
        keyword: str = "",
    ) -> None:
        self.stage = stage
        self.code = code
        self.detail = detail
        self.instance_path = instance_path
        self.schema_path = schema_path
        self.keyword = keyword
        super().__init__(f"{stage}/{code}: {detail}")


class BrokerError(ToolgateError):
    """The Kafka cluster refused or failed a request."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        self.retriable = retriable
        super().__init__(message)
