"""Settings: one object per service, from environment variables and an optional TOML file.

Every setting is ``section.field``. The environment variable is
``ANCHORWATCH_<SECTION>__<FIELD>`` (e.g. ``ANCHORWATCH_KAFKA__BOOTSTRAP_SERVERS``) and the
file key is ``field`` under ``[section]``. The file is named by ``--config`` or
``ANCHORWATCH_CONFIG``. Precedence: explicit arguments > environment > file > defaults.
Validation happens once at start; errors name the variable and the file key.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from anchorwatch.errors import AnchorwatchError

ENV_PREFIX = "ANCHORWATCH_"
CONFIG_ENV = "ANCHORWATCH_CONFIG"


class SettingsError(AnchorwatchError, ValueError):
    """Configuration that cannot be used; the message names every bad field."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: Kafka client properties whose values are credentials (sasl.password, sasl.jaas.config,
#: ssl.key.password, sasl.oauthbearer.client.secret, ssl.keystore.key, ...): masked wherever
#: settings print.
_SECRET_PROPERTY_WORDS = ("password", "secret", "jaas", "token", "key", "credential")


def masked_properties(properties: dict[str, str]) -> dict[str, str]:
    """``properties`` with the values of credential-like keys replaced by ``**********``."""
    return {
        k: "**********" if any(w in k.lower() for w in _SECRET_PROPERTY_WORDS) else v
        for k, v in properties.items()
    }


class KafkaSettings(Section):
    bootstrap_servers: str = Field(
        default="127.0.0.1:9092", min_length=1, description="Kafka bootstrap servers, host:port,..."
    )
    client_properties: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra Kafka client properties passed to every client, e.g. security.protocol, "
            "sasl.mechanism, ssl.ca.location (JSON object in the environment)."
        ),
    )
    java_properties: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Kafka properties for the JVM clients only (the Flink jobs), on top of "
            "client_properties, e.g. sasl.jaas.config; JSON object in the environment."
        ),
    )

    def __repr_args__(self) -> Any:
        # repr() and str() of any settings object (and so logs and tracebacks) never show
        # a credential given as a Kafka property.
        for name, value in super().__repr_args__():
            if name in ("client_properties", "java_properties") and isinstance(value, dict):
                value = masked_properties(value)
            yield name, value


class TopicSettings(Section):
    snapshots: str = Field("anchorwatch.snapshots", description="Validated snapshot events.")
    summaries: str = Field(
        "",
        description="Each accepted snapshot without its anchor log (SnapshotSummary in "
        "Avro, about 90 bytes), written by the connectors next to the full event; when set, "
        "the drift job reads this topic instead of the snapshots topic. Empty: not written, "
        "the job reads the full snapshots. Set it only when every producer of snapshots "
        "writes their summaries too (anchorwatch's connectors do).",
    )
    dead_letter: str = Field(
        "anchorwatch.dead-letter", description="Rejected input, with the raw record and reason."
    )
    windows: str = Field("anchorwatch.windows", description="Per doc type, per window aggregates.")
    verdicts: str = Field("anchorwatch.verdicts", description="Window verdicts.")
    baselines: str = Field(
        "anchorwatch.baselines", description="Per doc type baselines (compacted)."
    )
    drift_events: str = Field(
        "anchorwatch.drift-events", description="ANCHOR_DRIFT_ALERT events and resolutions."
    )
    partitions: int = Field(4, ge=1, le=1024, description="Partitions for new data topics.")
    replication_factor: int = Field(1, ge=1, le=16, description="Replication for new topics.")
    max_message_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024 * 1024,
        le=1024 * 1024 * 1024,
        description="max.message.bytes of new topics (the broker's message.max.bytes in the "
        "local stack); producers write records up to this minus 128 KiB of framing. Must "
        "hold the largest event the contract allows (the ingest service checks at start).",
    )

    @field_validator("snapshots", "dead_letter", "windows", "verdicts", "baselines", "drift_events")
    @classmethod
    def _legal_topic(cls, value: str) -> str:
        # Kafka's own rule: 1..249 chars of [a-zA-Z0-9._-].
        if not value or len(value) > 249 or not all(c.isalnum() or c in "._-" for c in value):
            raise ValueError("must be 1-249 characters of letters, digits, '.', '_' or '-'")
        return value

    @field_validator("summaries")
    @classmethod
    def _legal_or_empty_topic(cls, value: str) -> str:
        return value and cls._legal_topic(value)

    @property
    def drift_input(self) -> str:
        """The topic the drift job reads: the summaries when they are written."""
        return self.summaries or self.snapshots


def _default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/anchorwatch (default: ~/.cache/anchorwatch)"""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "anchorwatch"


class JvmSettings(Section):
    cache_dir: Path = Field(
        default_factory=_default_cache_dir,
        description="Where `anchorwatch jvm fetch` keeps the pinned jars.",
    )


S = TypeVar("S", bound="ServiceSettings")


class _TomlSource(PydanticBaseSettingsSource):
    """Reads ``[section]`` tables of the TOML file that belong to this settings class."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self._data: dict[str, Any] = {}
        if path is None:
            return
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SettingsError(f"config file {path}: not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"config file {path}: not valid TOML: {exc}") from None
        known = set(settings_cls.model_fields)
        # Sections for other services may share the file; keep only ours.
        self._data = {k: v for k, v in raw.items() if k in known}

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


class ServiceSettings(BaseSettings):
    """Base of every service's settings; the shared sections live here."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="ignore",
        frozen=True,
        validate_default=True,
    )
    _config_path: ClassVar[Path | None] = None

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    topics: TopicSettings = Field(default_factory=TopicSettings)
    jvm: JvmSettings = Field(default_factory=JvmSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlSource(settings_cls, cls._config_path))

    @classmethod
    def load(cls: type[S], config_file: Path | None = None, **overrides: Any) -> S:
        """Load and validate; raises SettingsError naming each bad field."""
        path = config_file or (Path(p) if (p := os.environ.get(CONFIG_ENV)) else None)
        # Sources are built by pydantic-settings from the class; pass the path through a
        # subclass so concurrent loads with different files cannot interfere.
        bound = type(cls.__name__, (cls,), {"_config_path": path})
        try:
            settings = bound(**overrides)
        except ValidationError as exc:
            raise SettingsError(_describe(exc, path)) from None
        return cls.model_validate(settings.model_dump())


def _describe(exc: ValidationError, path: Path | None) -> str:
    lines = ["invalid settings:"]
    for err in exc.errors(include_url=False, include_input=False):
        loc = [str(p) for p in err["loc"]]
        if not loc:  # across sections: the message names the fields
            lines.append(f"  {err['msg'].removeprefix('Value error, ')}")
            continue
        env = ENV_PREFIX + "__".join(p.upper() for p in loc)
        key = f"[{loc[0]}] {'.'.join(loc[1:])}" if len(loc) > 1 else loc[0]
        where = f" in {path}" if path else ""
        lines.append(f"  {'.'.join(loc)} ({env}, or {key}{where}): {err['msg']}")
    return "\n".join(lines)


def describe_fields(model: type[BaseModel], section: str | None = None) -> list[tuple[str, str]]:
    """(environment variable, description) of every setting: used for --help and docs."""
    rows = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            # A table inside a section ([routing] default_route) is read from
            # ANCHORWATCH_ROUTING__DEFAULT_ROUTE__<FIELD>: the whole path names it.
            rows.extend(describe_fields(annotation, f"{section}__{name}" if section else name))
            continue
        if section is None:
            continue
        env = f"{ENV_PREFIX}{section.upper()}__{name.upper()}"
        default = field.get_default(call_default_factory=True)
        shown = str(default) if isinstance(default, Path) else repr(default)
        rows.append((env, f"{field.description or ''} [default: {shown}]"))
    return rows
