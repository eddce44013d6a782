"""No credential reaches a log line: every secret a setting can hold (the SecretStr fields of
every service, and Kafka client properties that carry credentials), set to a marker, then the
settings object logged the ways code logs things — as an ``extra`` field, inside the message,
and in a traceback — through the service's own JSON formatter, and the captured output
searched for the marker."""

from __future__ import annotations

import io
import logging
import typing
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.cli.settings_cmd import all_settings
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.logs import JsonFormatter
from anchorwatch.settings import ServiceSettings

#: Valid for every secret field (a URL for the webhook ones, 16+ characters for tokens).
MARK = "https://s3cr3t-marker.example/s3cr3t-marker"

# Credentials as Kafka properties: the ones librdkafka and the Java client take.
KAFKA_SECRETS = {
    "sasl.password": MARK,
    "sasl.oauthbearer.client.secret": MARK,
    "ssl.key.password": MARK,
    "ssl.keystore.password": MARK,
}
JAVA_SECRETS = {"sasl.jaas.config": f'PlainLoginModule required password="{MARK}";'}


def _secret_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths.extend(_secret_paths(annotation, (*prefix, name)))
        elif annotation is SecretStr or SecretStr in typing.get_args(annotation):
            paths.append((*prefix, name))
    return paths


def _with_secrets(cls: type[ServiceSettings], extra: dict[str, dict[str, Any]]) -> Any:
    overrides: dict[str, dict[str, Any]] = {
        "kafka": {"client_properties": KAFKA_SECRETS, "java_properties": JAVA_SECRETS}
    }
    for section, name in _secret_paths(cls):
        overrides.setdefault(section, {})[name] = MARK
    for section, values in extra.items():
        overrides.setdefault(section, {}).update(values)
    return cls.load(None, **overrides)


def _logged(obj: object) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("anchorwatch.test.secrets")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("settings", extra={"settings": obj})
        log.warning("loaded %s", obj)
        log.warning(f"loaded {obj!r}")
        try:
            raise RuntimeError(f"cannot start with {obj!r}")
        except RuntimeError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    return out.getvalue()


# Fields that must be consistent with the secrets set above for the settings to load.
_CONSISTENT: dict[type[ServiceSettings], dict[str, dict[str, Any]]] = {
    AlertingSettings: {
        "slack": {"mode": "bot"},
        "jira": {"enabled": True, "url": "https://jira.example.com", "user": "a@b.c"},
    },
}


@pytest.mark.parametrize("cls", all_settings(), ids=lambda c: c.__name__)
def test_no_secret_of_any_service_reaches_a_log_line(cls: type[ServiceSettings]) -> None:
    settings = _with_secrets(cls, _CONSISTENT.get(cls, {}))
    assert settings.kafka.client_properties["sasl.password"] == MARK  # the value is kept
    lines = _logged(settings)
    assert lines.count("\n") >= 4
    assert MARK not in lines


def test_the_secret_fields_are_the_ones_the_services_have() -> None:
    # The walk above finds them, so a new secret field is covered without editing this test.
    assert "auth_token" in {p[-1] for p in _secret_paths(IngestSettings)}
    names = {p[-1] for p in _secret_paths(AlertingSettings)}
    assert {"bot_token", "webhook_url", "api_token"} <= names
