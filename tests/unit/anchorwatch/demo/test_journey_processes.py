"""The demo's services get their settings as environment variables the settings loader reads
back: complex fields (maps, lists) as JSON, flags in lower case."""

from __future__ import annotations

import pytest

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.demo.journey_processes import env_of


def test_settings_come_back_from_the_environment_as_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    channels = {"contracts": "#legal-drift", "invoice's": "#finance"}
    env = env_of({
        "alerting": {"dry_run": True, "poll_timeout_s": 0.2},
        "routing": {"doc_type_channels": channels},
        "kafka": {"bootstrap_servers": "127.0.0.1:9092"},
    })  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = AlertingSettings.load()
    assert settings.routing.doc_type_channels == channels
    assert settings.alerting.dry_run is True
    assert settings.alerting.poll_timeout_s == 0.2
    assert settings.kafka.bootstrap_servers == "127.0.0.1:9092"
