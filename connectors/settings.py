"""Settings of the ingest service (`anchorwatch ingest serve | replay`): the `[ingest]` section.

Environment: ``ANCHORWATCH_INGEST__<FIELD>``; file: ``field`` under ``[ingest]``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from anchorwatch.settings import Section, ServiceSettings, SettingsError

# RFC 9110 token characters: what a header field name may consist of.
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")

HeaderLocation = Literal["request", "response"]
_FILE_SETTING = "ingest.auth_token_file (ANCHORWATCH_INGEST__AUTH_TOKEN_FILE)"
#: Why `ingest serve` refuses to start with neither a token nor insecure_no_auth.
NO_CREDENTIALS = (
    "ingest: no bearer token for writers, so anyone who reaches the port could write events. "
    "Set ingest.credentials_file (ANCHORWATCH_INGEST__CREDENTIALS_FILE, --credentials-file), "
    "ingest.auth_token (ANCHORWATCH_INGEST__AUTH_TOKEN) or ingest.auth_token_file "
    "(ANCHORWATCH_INGEST__AUTH_TOKEN_FILE, --auth-token-file); or, for a local demo or a "
    "test only, accept unauthenticated writers with --insecure-no-auth "
    "(ANCHORWATCH_INGEST__INSECURE_NO_AUTH=true)"
)


class IngestOptions(Section):
    host: str = Field("127.0.0.1", min_length=1, description="Address the HTTP service binds to.")
    port: int = Field(8686, ge=0, le=65535, description="HTTP port (0: any free port).")
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "Server processes sharing the port (SO_REUSEPORT), each with its own Kafka "
            "producer; use one per core the service may have."
        ),
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        le=1024 * 1024 * 1024,
        description="Larger request bodies are refused with 413.",
    )
    auth_token: SecretStr | None = Field(
        None,
        description=(
            "Bearer token every ingest request must present (Authorization: Bearer ...). "
            "Unset, with no auth_token_file: `ingest serve` refuses to start unless "
            "insecure_no_auth is set."
        ),
    )
    auth_token_file: Path | None = Field(
        None,
        description="File holding the bearer token (surrounding whitespace ignored), read "
        "at start; an alternative to auth_token.",
    )
    credentials_file: Path | None = Field(
        None,
        description="Gateway credentials (JSON, written by `anchorwatch ingest credentials`): "
        "per gateway its doc types, rate limit, expiry and hashed secrets; each event gets "
        "the gateway's name as its source. Reread when it changes, without a restart. With "
        "auth_token(_file) too, both are accepted: the token as gateway `default`.",
    )
    tls_cert_file: Path | None = Field(
        None,
        description="PEM certificate (chain) the service presents: set with tls_key_file, "
        "it serves HTTPS only (every route, the probes included). Read at start.",
    )
    tls_key_file: Path | None = Field(
        None, description="PEM private key of tls_cert_file (unencrypted). Read at start."
    )
    tls_client_ca_file: Path | None = Field(
        None,
        description="PEM CA certificate(s) client certificates must chain to: set (with "
        "tls_cert_file), a client without such a certificate is refused at the TLS "
        "handshake (mutual TLS), and a gateway of credentials_file with `client_cert_cn` "
        "may write as itself by its certificate's subject CN instead of a bearer token.",
    )
    credentials_poll_s: float = Field(
        0.25,
        gt=0,
        le=60,
        description="How often the service checks credentials_file for a change (its "
        "mtime, size and inode): a revoked secret is refused within this.",
    )
    insecure_no_auth: bool = Field(
        False,
        description="Accept writers without a bearer token (for local demos and tests): "
        "the service then logs a warning at every start and reports "
        "anchorwatch_ingest_insecure_no_auth 1. Not with a token.",
    )
    request_id_header: str = Field(
        "x-request-id",
        description="Kong entries: header whose value becomes the event_id.",
    )
    doc_type_header: str = Field(
        "x-anthropic-doc-type", description="Kong entries: header carrying the document type."
    )
    snapshot_status_header: str = Field(
        "x-anthropic-snapshot-status",
        description="Kong entries: header carrying the snapshot status (active/disabled).",
    )
    anchor_count_header: str = Field(
        "x-anthropic-anchor-count", description="Kong entries: header carrying the anchor count."
    )
    snapshot_log_header: str = Field(
        "x-anthropic-snapshot-log",
        description="Kong entries: header carrying the per-anchor snapshot log (JSON).",
    )
    doc_type_header_locations: list[HeaderLocation] = Field(
        default_factory=lambda: list[HeaderLocation](["request"]),
        min_length=1,
        description="Kong entries: where the doc-type header is trusted, in lookup order "
        "(the caller declares its document type on its request).",
    )
    measurement_header_locations: list[HeaderLocation] = Field(
        default_factory=lambda: list[HeaderLocation](["response"]),
        min_length=1,
        description="Kong entries: where the snapshot status, anchor count and snapshot "
        "log headers are trusted, in lookup order. The upstream produces them on the "
        "response; a client can add any header to its request, so a request-side copy is "
        "ignored and counted (anchorwatch_ingest_headers_ignored_total) unless `request` "
        "is listed here.",
    )
    model_from: str = Field(
        "request_body_model",
        description="Kong entries: where an event's model version (`model`) comes from: "
        "`request_body_model` (the `model` of the request body, when Kong logs the body as "
        "request.body), `header:<name>` (a request header), `route` or `service` (the Kong "
        "route's or service's name). Absent there: no model; invalid: the entry is "
        "dead-lettered.",
    )
    max_future_skew_s: float = Field(
        300,
        ge=0,
        le=86_400,
        description="Events timed further than this ahead of the service's clock are "
        "dead-lettered: one event from the far future would move its partition's watermark.",
    )
    max_event_age_s: float = Field(
        7 * 24 * 3600,
        gt=0,
        description="Events older than this are dead-lettered: keep it at the snapshots "
        "topic's retention.ms (7 days as `anchorwatch stack` creates it), past which Kafka "
        "would delete them at once.",
    )
    redact_headers: list[str] = Field(
        default_factory=lambda: [
            "authorization",
            "proxy-authorization",
            "cookie",
            "set-cookie",
            "x-api-key",
            "api-key",
        ],
        description="Kong entries: headers whose values are replaced by REDACTED in the "
        "dead-letter copy of a rejected entry (API keys must not sit in a topic for 28 days).",
    )
    source: str = Field(
        "ingest",
        min_length=1,
        max_length=100,
        description="Label written as `source` on Kong events, on NDJSON events that carry "
        "none, and on dead letters.",
    )
    max_inflight_records: int = Field(
        200_000,
        ge=1,
        description="Records produced but not yet acknowledged by Kafka, beyond which "
        "requests get 503 + Retry-After instead of being buffered.",
    )
    max_inflight_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1024 * 1024,
        description="The same limit in bytes of encoded records.",
    )
    ack_timeout_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="How long a record may wait for Kafka's acknowledgement (the producer's "
        "message.timeout.ms). A request may first wait for the round before its own: keep "
        "twice this below the sender's timeout (Kong: config.timeout).",
    )
    retry_after_s: int = Field(5, ge=1, le=3600, description="Retry-After sent with every 503.")
    linger_ms: float = Field(
        5, ge=0, le=1000, description="Producer linger.ms: batching delay before sending."
    )
    compression: Literal["none", "lz4", "zstd", "snappy", "gzip"] = Field(
        "lz4",
        description="Producer compression.type: lz4 saves network to a remote cluster; none "
        "saves CPU per record when Kafka is close (docs/benchmarks.md).",
    )
    shutdown_timeout_s: float = Field(
        30, gt=0, description="On SIGTERM: how long in-flight requests may take to finish."
    )
    header_timeout_s: float = Field(
        10,
        gt=0,
        le=300,
        description="A request's line and headers must arrive within this, counted from the "
        "connection's opening or the request's first byte; else 408 and the connection closes.",
    )
    body_timeout_s: float = Field(
        60,
        gt=0,
        le=3600,
        description="A request's body must arrive within this once its headers have; else 408 "
        "and the connection closes.",
    )
    keepalive_timeout_s: float = Field(
        75,
        gt=0,
        le=3600,
        description="An idle keep-alive connection closes after this (above the sender's "
        "own idle timeout: Kong keeps idle upstream connections 60 s).",
    )
    max_bodies_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        description="Bytes of request bodies a worker holds at once, from reading to Kafka's "
        "acknowledgement (a batch of rejected entries costs about five times its size in "
        "memory); a request waits up to ack_timeout_s for room, else 503. At least "
        "max_body_bytes.",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="Open connections per worker; past it a new connection gets 503 and is "
        "closed. Kept below the process's open-file limit (raised to fit when allowed).",
    )

    @field_validator(
        "request_id_header",
        "doc_type_header",
        "snapshot_status_header",
        "anchor_count_header",
        "snapshot_log_header",
    )
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not _HEADER_NAME.match(value):
            raise ValueError("must be an HTTP header name (letters, digits, and !#$%&'*+-.^_`|~)")
        # HTTP header names are case-insensitive; lookups compare lower case.
        return value.lower()

    @field_validator(
        "auth_token",
        "auth_token_file",
        "credentials_file",
        "tls_cert_file",
        "tls_key_file",
        "tls_client_ca_file",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # Compose and .env files pass an unset variable as an empty string.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("redact_headers")
    @classmethod
    def _lower(cls, value: list[str]) -> list[str]:
        return [v.lower() for v in value]

    @field_validator("model_from")
    @classmethod
    def _model_from(cls, value: str) -> str:
        if value in ("request_body_model", "route", "service"):
            return value
        name = value.removeprefix("header:")
        if name == value or not _HEADER_NAME.match(name):
            raise ValueError(
                "must be request_body_model, route, service or header:<name> (an HTTP header name)"
            )
        return f"header:{name.lower()}"

    @field_validator("doc_type_header_locations", "measurement_header_locations")
    @classmethod
    def _distinct(cls, value: list[HeaderLocation]) -> list[HeaderLocation]:
        if len(set(value)) != len(value):
            raise ValueError("must not repeat a location")
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_shared_locations(cls, data: object) -> object:
        if isinstance(data, dict) and "header_locations" in data:
            raise ValueError(
                "header_locations: replaced by doc_type_header_locations (default request) "
                "and measurement_header_locations (default response): measurements are "
                "trusted only where the upstream writes them"
            )
        return data

    @model_validator(mode="after")
    def _bodies_fit(self) -> IngestOptions:
        if self.max_bodies_bytes < self.max_body_bytes:
            raise ValueError(
                f"max_bodies_bytes: {self.max_bodies_bytes} is below max_body_bytes "
                f"({self.max_body_bytes}): the largest body could never be read"
            )
        return self

    @model_validator(mode="after")
    def _one_token_source(self) -> IngestOptions:
        if self.auth_token is not None and self.auth_token_file is not None:
            raise ValueError("auth_token_file: set auth_token or auth_token_file, not both")
        if self.insecure_no_auth and (self.auth_token, self.auth_token_file) != (None, None):
            raise ValueError(
                "insecure_no_auth: a bearer token is set too (auth_token or auth_token_file); "
                "drop one: with a token, writers must present it"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_key_file: set tls_cert_file and tls_key_file together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError(
                "tls_client_ca_file: client certificates need TLS: set tls_cert_file and "
                "tls_key_file too"
            )
        if self.insecure_no_auth and self.credentials_file is not None:
            raise ValueError(
                "insecure_no_auth: credentials_file is set too; drop one: with credentials, "
                "writers must present a gateway's secret"
            )
        names = [
            self.request_id_header,
            self.doc_type_header,
            self.snapshot_status_header,
            self.anchor_count_header,
            self.snapshot_log_header,
        ]
        if len(set(names)) != len(names):
            raise ValueError("doc_type_header: the five header names must differ")
        return self

    def writer_token(self) -> bytes | None:
        """The legacy token writers may present, read now (from the file if one is named);
        None with insecure_no_auth or credentials_file alone. None of the three: SettingsError
        (``NO_CREDENTIALS``), naming the settings."""
        token = self.token()
        if token is None and self.credentials_file is None and not self.insecure_no_auth:
            raise SettingsError(NO_CREDENTIALS)
        return token

    def token(self) -> bytes | None:
        """The bearer token, read now from the file if one is named; None when none is set."""
        if self.auth_token is not None:
            return self.auth_token.get_secret_value().strip().encode()
        if self.auth_token_file is None:
            return None
        try:
            text = self.auth_token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SettingsError(
                f"{_FILE_SETTING}: cannot read {self.auth_token_file}: {exc}"
            ) from None
        if not text:
            raise SettingsError(f"{_FILE_SETTING}: {self.auth_token_file} is empty")
        return text.encode()


class IngestSettings(ServiceSettings):
    ingest: IngestOptions = Field(default_factory=IngestOptions)
