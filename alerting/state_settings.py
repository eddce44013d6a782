"""Where the alerting service keeps its state: the settings of ``alerting.*`` about it (the
rest of the section is in ``settings.py``, which builds on these)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.secret_fields import one_secret
from anchorwatch.settings import Section

_PASSWORD_ENV = "ANCHORWATCH_ALERTING__STATE_PASSWORD"  # noqa: S105 (a variable's name)


class StateFields(Section):
    state_dir: Path = Field(
        Path(".anchorwatch/alerting"),
        description="Directory of the service's SQLite state (incidents, outbox, offsets, "
        "detector state). One service per directory (a lock file enforces it). With "
        "state_url set, the state is in PostgreSQL instead.",
    )
    state_url: str | None = Field(
        None,
        description="PostgreSQL database of the state, e.g. "
        "postgresql://anchorwatch@db:5432/anchorwatch (no password in it: state_password). "
        "Instances on several hosts share it: one leads, the others wait as standbys and "
        "take over when its lease ends (docs/alerting.md).",
    )
    state_password: SecretStr | None = Field(
        None, description="Password of state_url's user (or state_password_file)."
    )
    state_password_file: Path | None = Field(
        None, description="File holding the password of state_url's user."
    )
    lease_s: float = Field(
        15.0,
        ge=1,
        le=600,
        description="With state_url: how long the leader's lease lasts unrenewed (renewed "
        "every third of it). A standby takes over at most this long after the leader died.",
    )
    work_split: bool = Field(
        False,
        description="With state_url: the instances share the work instead of one leading: "
        "each owns some verdict partitions (a Kafka consumer group, a lease per partition) "
        "and decides and posts for their doc types; a partition moves when its owner stops "
        "or dies (docs/alerting.md). The owner of partition 0 decides the groups.",
    )
    sqlite_synchronous: Literal["FULL", "NORMAL"] = Field(
        "FULL",
        description="FULL: every commit survives a power loss; NORMAL: faster, survives a "
        "process crash (kill -9) but may lose the last commits on a power loss.",
    )

    @field_validator("state_url")
    @classmethod
    def _state_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
            raise ValueError(
                "must be a postgresql://user@host:port/database URL "
                f"(scheme {parts.scheme or 'missing'!r})"
            )
        if parts.password is not None:
            raise ValueError(
                "must not carry a password (it would be shown in logs): set state_password "
                f"or state_password_file ({_PASSWORD_ENV})"
            )
        if not parts.path.strip("/"):
            raise ValueError("names no database (postgresql://user@host:port/DATABASE)")
        return value

    @model_validator(mode="after")
    def _state_secret(self) -> StateFields:
        self.state_secret()
        if self.work_split and self.state_url is None:
            raise ValueError("work_split: needs the state in PostgreSQL (state_url)")
        return self

    def state_secret(self) -> SecretStr | None:
        return one_secret(
            self.state_password, self.state_password_file, "state_password", _PASSWORD_ENV
        )

    def state_location(self) -> StateLocation:
        """Where the state is: the directory, and the database when state_url is set."""
        return StateLocation(self.state_dir, self.state_url, self.state_secret())
