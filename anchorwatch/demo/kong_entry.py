"""Kong http-log entries for generated snapshot events: the object Kong's http-log plugin
would have posted for each request (``to_kong_entry``), the snapshot carried in the headers
``KongHeaderNames`` names. Pure: the same event always gives the same entry.
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass
from typing import Any, Final

import orjson

from anchorwatch.contracts.models import SnapshotEvent


@dataclass(frozen=True, slots=True)
class KongHeaderNames:
    """Headers that carry the snapshot in a Kong http-log entry."""

    doc_type: str = "x-anthropic-doc-type"
    snapshot_status: str = "x-anthropic-snapshot-status"
    anchor_count: str = "x-anthropic-anchor-count"
    snapshot_log: str = "x-anthropic-snapshot-log"
    request_id: str = "x-request-id"


DEFAULT_KONG_HEADERS: Final = KongHeaderNames()

_SERVICE_ID: Final = str(uuid.uuid5(uuid.NAMESPACE_URL, "anchorwatch:service:anthropic-messages"))
_ROUTE_ID: Final = str(uuid.uuid5(uuid.NAMESPACE_URL, "anchorwatch:route:llm-messages"))
_CONFIG_TIME_S: Final = 1_764_000_000  # created_at / updated_at of the service and route


def to_kong_entry(
    event: SnapshotEvent, *, headers: KongHeaderNames = DEFAULT_KONG_HEADERS
) -> dict[str, Any]:
    """The object Kong's http-log plugin would have posted for ``event``'s request.

    The caller declares the doc type on its request; the upstream's measurements (status,
    anchor count, snapshot log) arrive on the response (string values, as Kong logs them).
    The event's model is in the request body, which Kong logs as ``request.body`` when
    http-log's ``custom_fields_by_lua`` asks for it (text, shortened here to the fields
    that matter; no model: no body, as Kong logs by default). Its latency is Kong's
    ``latencies.request``, split into Kong's own time and the upstream's (no latency: no
    ``request`` member). Sizes, the split and the client address are drawn from a stream
    seeded by the event id, so the same event always gives the same entry.
    """
    rng = random.Random(f"kong:{event.event_id}")
    snapshot_log = orjson.dumps([a.model_dump(mode="json") for a in event.anchors]).decode()
    request_size = 1_200 + event.anchor_count * rng.randint(800, 4_000)
    response_size = rng.randint(600, 8_000)
    kong, queued = rng.randint(1, 12), rng.randint(0, 5)
    latencies: dict[str, int]
    if event.latency_ms is None:
        proxy = int(rng.lognormvariate(math.log(2_500), 0.5)) + 15 * event.anchor_count
        latencies = {"kong": kong, "proxy": proxy}
    else:
        total = event.latency_ms
        kong = min(kong, total)
        proxy = max(0, total - kong - queued)
        latencies = {"request": total, "kong": kong, "proxy": proxy}
    request: dict[str, Any] = {
        "method": "POST",
        "uri": "/v1/messages",
        "url": "http://llm-gateway.internal:8000/v1/messages",
        "size": request_size,
        "querystring": {},
        "headers": {
            "host": "llm-gateway.internal:8000",
            "content-type": "application/json",
            "content-length": str(request_size - 400),
            "anthropic-version": "2023-06-01",
            "user-agent": "anchorwatch-generator/1",
            headers.request_id: event.event_id,
            headers.doc_type: event.doc_type,
        },
    }
    if event.model is not None:
        body = {"model": event.model, "max_tokens": 4096}
        request["body"] = orjson.dumps(body).decode()
    return {
        "request": request,
        "upstream_uri": "/v1/messages",
        "response": {
            "status": 200,
            "size": response_size,
            "headers": {
                "content-type": "application/json",
                "content-length": str(response_size - 300),
                "x-kong-upstream-latency": str(proxy),
                "x-kong-proxy-latency": str(kong),
                "via": "kong/3.9.0",
                headers.request_id: event.event_id,
                headers.snapshot_status: event.snapshot_status,
                headers.anchor_count: str(event.anchor_count),
                headers.snapshot_log: snapshot_log,
            },
        },
        "started_at": event.event_time_ms,
        "latencies": latencies,
        "tries": [
            {
                "ip": "160.79.104.10",
                "port": 443,
                "balancer_start": event.event_time_ms + kong,
                "balancer_latency": 0,
            }
        ],
        "service": {
            "id": _SERVICE_ID,
            "name": "anthropic-messages",
            "host": "api.anthropic.com",
            "port": 443,
            "protocol": "https",
            "path": "/",
            "retries": 5,
            "connect_timeout": 60_000,
            "read_timeout": 600_000,
            "write_timeout": 60_000,
            "created_at": _CONFIG_TIME_S,
            "updated_at": _CONFIG_TIME_S,
        },
        "route": {
            "id": _ROUTE_ID,
            "name": "llm-messages",
            "paths": ["/v1/messages"],
            "methods": ["POST"],
            "protocols": ["http", "https"],
            "strip_path": False,
            "preserve_host": False,
            "service": {"id": _SERVICE_ID},
            "created_at": _CONFIG_TIME_S,
            "updated_at": _CONFIG_TIME_S,
        },
        "client_ip": f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        "source": "upstream",
    }
