"""The ingest service's settings: defaults, environment, validation naming the field, secrets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anchorwatch.connectors.server import kong_format
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.settings import SettingsError, describe_fields


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("ANCHORWATCH_"):
            monkeypatch.delenv(key)


def test_defaults_match_the_documented_header_names() -> None:
    s = IngestSettings.load()
    assert (s.ingest.host, s.ingest.port, s.ingest.workers) == ("127.0.0.1", 8686, 1)
    assert s.ingest.token() is None
    fmt = kong_format(s)
    assert (fmt.doc_type, fmt.snapshot_status, fmt.anchor_count, fmt.snapshot_log) == (
        "x-anthropic-doc-type",
        "x-anthropic-snapshot-status",
        "x-anthropic-anchor-count",
        "x-anthropic-snapshot-log",
    )
    assert fmt.request_id == "x-request-id"
    # The caller declares the doc type; only the upstream's response carries measurements.
    assert (fmt.doc_type_locations, fmt.measurement_locations) == (("request",), ("response",))
    assert (s.ingest.max_future_skew_s, s.ingest.max_event_age_s) == (300, 7 * 86_400)


def test_environment_and_file_configure_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "aw.toml"
    config.write_text('[ingest]\nport = 9999\ndoc_type_header = "X-Doc-Type"\n')
    monkeypatch.setenv("ANCHORWATCH_INGEST__DOC_TYPE_HEADER_LOCATIONS", '["response"]')
    s = IngestSettings.load(config)
    assert s.ingest.port == 9999
    assert s.ingest.doc_type_header == "x-doc-type"  # compared case-insensitively
    assert kong_format(s).doc_type_locations == ("response",)
    assert kong_format(s).model_from == "request_body_model"
    monkeypatch.setenv("ANCHORWATCH_INGEST__MODEL_FROM", "header:X-Model")
    assert kong_format(IngestSettings.load(config)).model_from.lower() == "header:x-model"


@pytest.mark.parametrize(
    ("ingest", "message"),
    [
        (
            {"doc_type_header": "x doc"},
            "ingest.doc_type_header (ANCHORWATCH_INGEST__DOC_TYPE_HEADER",
        ),
        ({"max_body_bytes": 10}, "ingest.max_body_bytes"),
        ({"doc_type_header_locations": ["request", "request"]}, "must not repeat a location"),
        ({"measurement_header_locations": ["body"]}, "ingest.measurement_header_locations.0"),
        ({"measurement_header_locations": []}, "ingest.measurement_header_locations"),
        ({"header_locations": ["request"]}, "header_locations: replaced by"),
        ({"max_future_skew_s": -1}, "ingest.max_future_skew_s"),
        ({"max_event_age_s": 0}, "ingest.max_event_age_s"),
        ({"anchor_count_header": "x-anthropic-doc-type"}, "the five header names must differ"),
        ({"auth_token": "t", "auth_token_file": "/x"}, "set auth_token or auth_token_file"),
        ({"auth_token": "t", "insecure_no_auth": True}, "insecure_no_auth: a bearer token"),
        ({"auth_token_file": "/x", "insecure_no_auth": True}, "insecure_no_auth: a bearer"),
        ({"source": ""}, "ingest.source"),
    ],
)
def test_bad_settings_name_the_field(ingest: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError) as info:
        IngestSettings.load(ingest=ingest)
    assert message in str(info.value)


def test_the_token_comes_from_the_environment_or_a_file_and_is_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANCHORWATCH_INGEST__AUTH_TOKEN", "s3cret-env")
    s = IngestSettings.load()
    assert s.ingest.token() == b"s3cret-env"
    assert "s3cret" not in repr(s)
    assert "s3cret" not in s.model_dump_json()
    # An empty variable (what Compose passes for an unset one) is no token: the service
    # then refuses to start (tests/unit/connectors/test_auth_default.py).
    monkeypatch.setenv("ANCHORWATCH_INGEST__AUTH_TOKEN", " ")
    monkeypatch.setenv("ANCHORWATCH_INGEST__AUTH_TOKEN_FILE", "")
    assert IngestSettings.load().ingest.token() is None
    monkeypatch.delenv("ANCHORWATCH_INGEST__AUTH_TOKEN")
    monkeypatch.delenv("ANCHORWATCH_INGEST__AUTH_TOKEN_FILE")
    token_file = tmp_path / "token"
    token_file.write_text("  s3cret-file\n")
    assert IngestSettings.load(ingest={"auth_token_file": token_file}).ingest.token() == (
        b"s3cret-file"
    )
    token_file.write_text("\n")
    with pytest.raises(SettingsError, match=r"ingest.auth_token_file .* is empty"):
        IngestSettings.load(ingest={"auth_token_file": token_file}).ingest.token()
    with pytest.raises(SettingsError, match="cannot read"):
        IngestSettings.load(ingest={"auth_token_file": tmp_path / "missing"}).ingest.token()


def test_every_setting_is_described() -> None:
    rows = dict(describe_fields(IngestSettings))
    assert "ANCHORWATCH_INGEST__MAX_BODY_BYTES" in rows
    assert all(text and not text.startswith(" [default") for text in rows.values())
