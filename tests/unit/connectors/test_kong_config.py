"""The sample Kong configuration fits Kong's http-log schema and the service's defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from anchorwatch.connectors.settings import IngestSettings

SAMPLE = Path(__file__).parents[3] / "connectors" / "kong-http-log.yaml"

# Kong Gateway 3.x http-log plugin schema: config fields, and the queue record's fields with
# their allowed ranges (kong/plugins/http-log/schema.lua, kong/tools/queue_schema.lua).
CONFIG_FIELDS = {
    "http_endpoint",
    "method",
    "content_type",
    "timeout",
    "keepalive",
    "headers",
    "queue",
    "custom_fields_by_lua",
}
QUEUE_RANGES: dict[str, tuple[float, float]] = {
    "max_batch_size": (1, 1_000_000),
    "max_coalescing_delay": (0, 3600),
    "max_entries": (1, 1_000_000),
    "max_bytes": (0, float("inf")),
    "max_retry_time": (-1, float("inf")),
    "initial_retry_delay": (0.001, 1_000_000),
    "max_retry_delay": (0.001, 1_000_000),
    "concurrency_limit": (-1, 1),
}


def _plugin() -> dict[str, Any]:
    config = yaml.safe_load(SAMPLE.read_text())
    plugins = [p for s in config["services"] for p in s["plugins"] if p["name"] == "http-log"]
    assert len(plugins) == 1
    plugin: dict[str, Any] = plugins[0]["config"]
    return plugin


def test_the_sample_uses_only_fields_of_kongs_schema_within_their_ranges() -> None:
    config = _plugin()
    assert set(config) <= CONFIG_FIELDS
    assert config["method"] in ("POST", "PUT", "PATCH")
    assert config["content_type"] == "application/json"
    assert set(config["queue"]) <= set(QUEUE_RANGES)
    for name, value in config["queue"].items():
        low, high = QUEUE_RANGES[name]
        assert low <= value <= high, name
    assert config["queue"]["concurrency_limit"] in (-1, 1)


def test_the_sample_fits_the_services_defaults() -> None:
    config = _plugin()
    ingest = IngestSettings.load().ingest
    endpoint = urlsplit(config["http_endpoint"])
    assert (endpoint.path, endpoint.port) == ("/v1/kong", ingest.port)
    # Batching on: Kong then posts a JSON array.
    assert config["queue"]["max_batch_size"] > 1
    # A batch of large entries (10 KiB each) still fits under the body limit.
    assert config["queue"]["max_batch_size"] * 10 * 1024 < ingest.max_body_bytes
    # Kong waits longer than the service may wait for Kafka's acknowledgement.
    assert config["timeout"] > ingest.ack_timeout_s * 1000
    # Retries outlast more than the default 60 s of Kafka being away.
    assert config["queue"]["max_retry_time"] > 60
    assert config["headers"]["Authorization"].startswith("Bearer {vault://")


def test_the_sample_strips_client_copies_of_the_measurement_headers() -> None:
    """The measurements are the upstream's (on the response); a client's request copies
    are removed before proxying, and the doc type, which the caller declares, is kept."""
    config = yaml.safe_load(SAMPLE.read_text())
    plugins = {p["name"]: p["config"] for s in config["services"] for p in s["plugins"]}
    removed = {h.lower() for h in plugins["request-transformer"]["remove"]["headers"]}
    ingest = IngestSettings.load().ingest
    assert ingest.measurement_header_locations == ["response"]
    measurements = {
        ingest.snapshot_status_header,
        ingest.anchor_count_header,
        ingest.snapshot_log_header,
    }
    assert removed == measurements
    assert ingest.doc_type_header not in removed
