"""Hostile input through the real ingest service and broker (topics private to each test):
a thousand model names from one client, anchor ids too long or holding control characters,
latencies that are negative or text. Each is bounded or dead-lettered with a reason naming
its field, and the entries beside it in the same request are written as usual."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from anchorwatch.contracts import DeadLetter, SnapshotEvent, SnapshotSummary, decode, encode
from anchorwatch.contracts.avro import decode_summary
from anchorwatch.contracts.models import MODEL_VERSION_MAX_CHARS
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.jobs.settings import JobSettings
from tests.support.ingest import (
    as_written,
    events,
    ingest_settings,
    records,
    serving,
    summaries_written,
)

pytestmark = [pytest.mark.integration]

LOG = "x-anthropic-snapshot-log"


@pytest.fixture
def with_summaries(job_settings: JobSettings) -> Iterator[JobSettings]:
    with summaries_written(job_settings) as settings:
        yield settings


def _post_all(settings: JobSettings, posts: list[tuple[str, bytes]]) -> tuple[list[Any], str]:
    """Post each (path, body) in turn to a running service; its answers and its metrics."""

    async def scenario() -> tuple[list[Any], str]:
        service_settings = ingest_settings(settings)
        async with serving(service_settings) as (_, url), aiohttp.ClientSession() as http:
            answers = []
            for path, body in posts:
                headers = {"Content-Type": "application/x-ndjson"} if path == "/v1/events" else {}
                async with http.post(f"{url}{path}", data=body, headers=headers) as r:
                    assert r.status == 200, await r.text()
                    answers.append(await r.json())
            async with http.get(f"{url}/metrics") as r:
                return answers, await r.text()

    return asyncio.run(scenario())


_SERIES = re.compile(r"^(anchorwatch_ingest_\w+\{[^}]*\})", re.MULTILINE)


def _series(metrics: str) -> set[str]:
    return set(_SERIES.findall(metrics))


def _letter_id(letter: DeadLetter) -> str:
    """The event id of a dead letter's record: an NDJSON line's own, a Kong entry's header."""
    raw = orjson.loads(letter.raw)
    return str(raw.get("event_id") or raw["request"]["headers"]["x-request-id"])


def _letters(settings: JobSettings) -> list[DeadLetter]:
    return [
        decode(DeadLetter, m.value or b"") for m in records(settings, settings.topics.dead_letter)
    ]


def test_a_thousand_models_from_one_client_are_accepted_with_no_metric_per_model(
    with_summaries: JobSettings,
) -> None:
    """A model is a bounded value of its event: ingest keeps no state and no label per
    model, so a client naming a new one on every request costs it nothing."""
    base = events()
    models = [
        (f"modèle-{i:04d}" if i % 10 == 0 else f"tenant-{i:04d}-").ljust(
            MODEL_VERSION_MAX_CHARS, "x"
        )
        for i in range(1000)
    ]
    hostile = [
        base[i % len(base)].model_copy(update={"event_id": f"hostile-{i}", "model": m})
        for i, m in enumerate(models)
    ]
    warm = base[0].model_copy(update={"model": "summarizer-2.1"})
    (first, answer), metrics_after = _post_all(
        with_summaries,
        [
            ("/v1/kong", orjson.dumps([to_kong_entry(warm)])),
            ("/v1/kong", orjson.dumps([to_kong_entry(e) for e in hostile])),
        ],
    )
    assert first["accepted"] == 1
    assert (answer["accepted"], answer["rejected"]) == (1000, 0)
    written = {
        orjson.loads(m.value or b"")["event_id"]: m.value
        for m in records(with_summaries, with_summaries.topics.snapshots)
    }
    assert len(written) == 1001
    for e in hostile:
        assert written[e.event_id] == as_written(e)
    summaries = {
        s.event_id: s
        for s in (
            decode_summary(m.value or b"")
            for m in records(with_summaries, with_summaries.topics.summaries)
        )
    }
    assert {summaries[e.event_id].model for e in hostile} == set(models)
    # No label holds a model: every series after the thousand models (but the request
    # counters' values) existed after the first request already, none of them names one.
    assert "tenant-" not in metrics_after
    assert "modèle" not in metrics_after
    _, metrics_first = _post_all(
        with_summaries, [("/v1/kong", orjson.dumps([to_kong_entry(warm)]))]
    )
    assert len(_series(metrics_first)) > 10
    assert _series(metrics_after) == _series(metrics_first)


def _with_anchor_id(event: SnapshotEvent, anchor_id: str, event_id: str) -> dict[str, Any]:
    """``event``'s Kong entry, its first anchor's id replaced in the logged snapshot log."""
    entry = to_kong_entry(event.model_copy(update={"event_id": event_id}))
    log = orjson.loads(entry["response"]["headers"][LOG])
    log[0]["anchor_id"] = anchor_id
    entry["response"]["headers"][LOG] = orjson.dumps(log).decode()
    return entry


HOSTILE_IDS = [
    ("SECTION_" + "x" * 9_992, "String should have at most 200 characters"),
    ("SECTION_\x00\x1b[2J", "String should match pattern"),
    ("TABLE_1\n", "String should match pattern"),
]


def test_anchor_ids_too_long_or_with_control_characters_are_dead_lettered_alone(
    with_summaries: JobSettings,
) -> None:
    good = [e for e in events() if e.anchors][:4]
    kong = [to_kong_entry(good[0])]
    lines = [encode(good[1])]
    for i, (anchor_id, _) in enumerate(HOSTILE_IDS):
        kong.append(_with_anchor_id(good[0], anchor_id, f"bad-kong-{i}"))
        line = orjson.loads(encode(good[1].model_copy(update={"event_id": f"bad-line-{i}"})))
        line["anchors"][0]["anchor_id"] = anchor_id
        lines.append(orjson.dumps(line))
    kong.append(to_kong_entry(good[2]))
    lines.append(encode(good[3]))
    answers, metrics = _post_all(
        with_summaries,
        [("/v1/kong", orjson.dumps(kong)), ("/v1/events", b"\n".join(lines))],
    )
    assert [(a["accepted"], a["rejected"]) for a in answers] == [(2, 3), (2, 3)]
    written = sorted(
        m.value or b"" for m in records(with_summaries, with_summaries.topics.snapshots)
    )
    expected = [as_written(good[0]), as_written(good[2]), encode(good[1]), encode(good[3])]
    assert written == sorted(expected)
    assert len(records(with_summaries, with_summaries.topics.summaries)) == 4
    letters = {_letter_id(dl): dl for dl in _letters(with_summaries)}
    for i, (_, reason) in enumerate(HOSTILE_IDS):
        kong_letter, line_letter = letters[f"bad-kong-{i}"], letters[f"bad-line-{i}"]
        assert kong_letter.field == f"response.headers.{LOG}[0].anchor_id"
        assert line_letter.field == "anchors[0].anchor_id"
        for letter in (kong_letter, line_letter):
            assert f"{letter.field}: {reason}" in letter.reason
            assert len(letter.reason) <= 2_000  # the id itself is in the raw record only
    # The reason label is the field, indexes dropped: one series, whatever the ids.
    label = f'reason="response.headers.{LOG}[].anchor_id"'
    assert f'anchorwatch_ingest_rejected_total{{format="kong",{label}}} 3.0' in metrics
    assert "x" * 200 not in metrics


@pytest.mark.parametrize("value", [-1, -250, "120", "", 120.5, True])
def test_a_negative_or_text_latency_is_dead_lettered_naming_latencies_request(
    with_summaries: JobSettings, value: Any
) -> None:
    good = list(events()[:3])
    bad = to_kong_entry(good[1])
    bad["latencies"]["request"] = value
    body = orjson.dumps([to_kong_entry(good[0]), bad, to_kong_entry(good[2])])
    line = orjson.loads(encode(good[1]))
    line["latency_ms"] = value
    ndjson = b"\n".join([encode(good[0]), orjson.dumps(line), encode(good[2])])
    answers, metrics = _post_all(with_summaries, [("/v1/kong", body), ("/v1/events", ndjson)])
    assert [(a["accepted"], a["rejected"]) for a in answers] == [(2, 1), (2, 1)]
    assert [a["reasons"][0]["field"] for a in answers] == ["latencies.request", "latency_ms"]
    written = sorted(
        m.value or b"" for m in records(with_summaries, with_summaries.topics.snapshots)
    )
    expected = [as_written(good[0]), as_written(good[2]), encode(good[0]), encode(good[2])]
    assert written == sorted(expected)
    # Each accepted event's summary is the contract's, with the latency the event carries.
    summaries = [
        decode_summary(m.value or b"").model_dump_json()
        for m in records(with_summaries, with_summaries.topics.summaries)
    ]
    assert sorted(summaries) == sorted(
        SnapshotSummary.of(SnapshotEvent.model_validate_json(w)).model_dump_json() for w in written
    )
    assert all(orjson.loads(s)["latency_ms"] is not None for s in summaries)
    kong_letter, line_letter = sorted(_letters(with_summaries), key=lambda dl: dl.field)
    assert kong_letter.field == "latencies.request"
    assert kong_letter.reason.startswith("invalid Kong http-log entry: latencies.request: ")
    assert orjson.loads(kong_letter.raw) == bad
    assert line_letter.field == "latency_ms"
    assert 'anchorwatch_ingest_rejected_total{format="kong",reason="latencies.request"} 1.0' in (
        metrics
    )
