"""Kong log entries for the ingest tests (unit and integration): events from the traffic
generator, the header names the default Kong format reads, a batch of five entries of which
two must be dead-lettered, and an entry whose bytes are not UTF-8.
"""

from __future__ import annotations

import copy
import functools

import orjson

from anchorwatch.contracts import SnapshotEvent
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry

#: The headers the default Kong format reads.
DOC = "x-anthropic-doc-type"
STATUS = "x-anthropic-snapshot-status"
COUNT = "x-anthropic-anchor-count"
LOG = "x-anthropic-snapshot-log"
RID = "x-request-id"


@functools.lru_cache(maxsize=1)
def generated_events() -> tuple[SnapshotEvent, ...]:
    traffic = generate(TrafficConfig(seed=5, minutes=3, doc_types=4))
    return tuple(r.event for r in traffic.records() if r.event is not None)


def generated_event(anchors: int = 2) -> SnapshotEvent:
    return next(e for e in generated_events() if len(e.anchors) >= anchors)


def latin1_user_agent_entry() -> bytes:
    entry = to_kong_entry(generated_event(1))
    entry["request"]["headers"]["user-agent"] = "UA-PLACEHOLDER"
    entry["request"]["headers"]["x-api-key"] = "sk-secret"
    return orjson.dumps(entry).replace(b"UA-PLACEHOLDER", "Müller-Client/1".encode("latin-1"))


def five_entry_batch() -> tuple[bytes, list[SnapshotEvent]]:
    """Two valid entries (one with odd-case and list-valued headers and two different
    X-Request-Id values), one with a string drift_score, one without a doc type, one with
    the doc type ``<!channel> "DO" \\ report*`` (valid: escaping is the renderer's job)."""
    events = [e for e in generated_events() if len(e.anchors) >= 2][:4]
    odd_type = '<!channel> "DO" \\ report*'
    entries = [to_kong_entry(e) for e in events[:3]]
    odd = entries[1]
    odd["request"]["headers"] = {k.upper(): v for k, v in odd["request"]["headers"].items()}
    odd["request"]["headers"]["X-REQUEST-ID"] = ["req-one", "req-two"]
    odd["request"]["id"] = "kong-id-of-the-second"
    response = odd["response"]["headers"]
    response["X-Anthropic-Snapshot-Status"] = [response.pop(STATUS)] * 2
    response[COUNT] = [response.pop(COUNT)]
    string_drift = entries[2]
    anchors = orjson.loads(string_drift["response"]["headers"][LOG])
    anchors[0]["drift_score"] = str(anchors[0]["drift_score"])
    string_drift["response"]["headers"][LOG] = orjson.dumps(anchors).decode()
    no_doc_type = copy.deepcopy(entries[0])
    no_doc_type["request"]["headers"].pop(DOC)
    no_doc_type["request"]["headers"][RID] = "no-doc-type"
    odd_doc = to_kong_entry(events[3].model_copy(update={"doc_type": odd_type}))
    body = orjson.dumps([entries[0], odd, string_drift, no_doc_type, odd_doc])
    expected = [
        events[0],
        events[1].model_copy(update={"event_id": "kong-id-of-the-second"}),
        events[3].model_copy(update={"doc_type": odd_type}),
    ]
    return body, expected
