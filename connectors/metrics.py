"""Prometheus metrics of the ingest service, on an injectable registry.

With several worker processes, prometheus_client's multiprocess mode aggregates the
workers' values (``PROMETHEUS_MULTIPROC_DIR``, set up by ``server.serve``); gauges then say
how to combine them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_ROUND_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000)


class IngestMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.records = Counter(
            "anchorwatch_ingest_records_total",
            "Records by outcome once answered: accepted (in the snapshots topic), rejected "
            "(in the dead-letter topic), failed (the client was told to retry: 503).",
            ["format", "outcome"],
            registry=registry,
        )
        self.rejected = Counter(
            "anchorwatch_ingest_rejected_total",
            "Dead-lettered records by reason: the first bad field, list indexes removed.",
            ["format", "reason"],
            registry=registry,
        )
        self.headers_ignored = Counter(
            "anchorwatch_ingest_headers_ignored_total",
            "Kong snapshot headers found where they are not trusted (by default: a "
            "measurement on the client's request), ignored, by configured header name.",
            ["header"],
            registry=registry,
        )
        self.request_id_fallbacks = Counter(
            "anchorwatch_ingest_request_id_fallbacks_total",
            "Kong events whose request-id header was unusable and whose event_id came from "
            "Kong's request.id or a hash of the entry, by cause: conflict (repeated with "
            "different values), invalid (not an identifier).",
            ["cause"],
            registry=registry,
        )
        self.requests = Histogram(
            "anchorwatch_ingest_request_seconds",
            "Ingest request latency, from the request line to the response, by status code.",
            ["format", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.produce = Histogram(
            "anchorwatch_ingest_produce_seconds",
            "From a request's records reaching the producer (waiting for the round in flight "
            "included) to Kafka acknowledging its last one.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.round_records = Histogram(
            "anchorwatch_ingest_produce_round_records",
            "Records handed to Kafka together in one round: every request that arrived while "
            "the round before was in flight.",
            buckets=_ROUND_BUCKETS,
            registry=registry,
        )
        self.bytes_in = Counter(
            "anchorwatch_ingest_received_bytes_total",
            "Request body bytes received.",
            ["format"],
            registry=registry,
        )
        self.unavailable = Counter(
            "anchorwatch_ingest_unavailable_total",
            "503 answers by cause: kafka_down, queue_full, delivery_failed, shutting_down.",
            ["cause"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "anchorwatch_ingest_producer_queue_records",
            "Records in the producer's queue: waiting to be sent or to be acknowledged.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.inflight_bytes = Gauge(
            "anchorwatch_ingest_inflight_bytes",
            "Bytes of records handed to the producer and not yet acknowledged.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.insecure_no_auth = Gauge(
            "anchorwatch_ingest_insecure_no_auth",
            "1 when the service accepts writers without a bearer token (started with "
            "--insecure-no-auth: local demos and tests only), else 0.",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.unauthorized = Counter(
            "anchorwatch_ingest_unauthorized_total",
            "Writes refused 401, by cause: missing (no bearer token), unknown (no such "
            "token), expired (the secret or its gateway has expired).",
            ["cause"],
            registry=registry,
        )
        self.out_of_scope = Counter(
            "anchorwatch_ingest_out_of_scope_total",
            "Events dead-lettered because their doc type is outside their gateway's "
            "doc_types (ingest.credentials_file), by gateway.",
            ["gateway"],
            registry=registry,
        )
        self.rate_limited = Counter(
            "anchorwatch_ingest_rate_limited_total",
            "Requests answered 429 because their gateway was past its rate limit, by gateway.",
            ["gateway"],
            registry=registry,
        )
        self.credentials_reloads = Counter(
            "anchorwatch_ingest_credentials_reloads_total",
            "Rereads of ingest.credentials_file after it changed, by outcome: ok, error "
            "(the last good credentials are kept).",
            ["outcome"],
            registry=registry,
        )
        self.kafka_up = Gauge(
            "anchorwatch_ingest_kafka_up",
            "1 when the producer has a connection to a Kafka broker, else 0.",
            registry=registry,
            multiprocess_mode="livemin",
        )
