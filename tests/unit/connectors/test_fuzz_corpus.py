"""Fuzzing the ingest reader, the part CI runs: the committed fuzz corpus replayed through
both paths, and short hypothesis runs of mutated bodies, through both paths and through the
service's request handling.

The corpus (connectors/native/fuzz/corpus/) is what coverage-guided fuzzing of the compiled
reader kept (`make fuzz`, docs/ingest.md "Fuzzing"); replaying it here checks that the reference
path decides each of those inputs as the compiled one does: the same events, bytes and
rejections. connectors/test_fastpath.py holds the structured comparisons; the inputs here are
bytes, made by a fuzzer or by splicing bytes into ordinary bodies.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anchorwatch.connectors.producer import Delivery
from anchorwatch.connectors.publisher import dead_letter
from anchorwatch.connectors.records import Rejected, kong_body, ndjson_body
from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.connectors.validation import Accepted, summary_of
from anchorwatch.contracts import SnapshotEvent, encode, validate
from anchorwatch.stack.processes import free_port
from bench.fuzz_ingest import CORPUS, TARGETS, corpus_files, replay, seeds
from tests.support.fastpath import FORMATS, WINDOWS, assert_paths_agree

pytestmark = pytest.mark.slow


def test_the_committed_corpus_is_decided_alike_by_both_paths() -> None:
    figures = replay(CORPUS, work=False)
    for target in TARGETS:
        f = figures[target]
        assert f.inputs >= 20, f"{target}: the corpus is missing ({CORPUS / target})"
        # Else the replay compares only what the reference path decides either way.
        assert f.fast_accepted > 0, target
        assert f.differences == [], f.differences[:3]


def test_every_summary_the_compiled_path_writes_for_the_corpus_is_pythons() -> None:
    """The reader writes each accepted event's summary in the same pass (summary.rs);
    whatever it accepts, that summary is the one made from the record in Python."""
    checked = 0
    for target in TARGETS:
        for path in corpus_files(CORPUS, target, work=False):
            parse = kong_body if target == "kong" else ndjson_body
            try:
                batch = parse(path.read_bytes(), source="fuzz")
            except ValueError:  # BodyError: the 400
                continue
            for accepted in batch.accepted:
                assert accepted.summary == summary_of(accepted.value), path
                checked += 1
    assert checked > 50


def test_the_corpus_stays_small() -> None:
    for target in TARGETS:
        files = corpus_files(CORPUS, target, work=False)
        assert len(files) <= 700, f"{target}: minimise it (docs/ingest.md, Fuzzing)"
        assert sum(p.stat().st_size for p in files) <= 2_000_000


# ---------------------------------------------------------------------- mutated bodies

_TOKENS = [
    b'"',
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"\xff",
    b"\xc2\xa0",
    b"\n",
    b",",
    b"[",
    b"]",
    b"{",
    b"}",
    b":",
    b"null",
    b"1e400",
    b"-0",
    b"1e16",
    b"18446744073709551616",
    b'"X-Anthropic-Doc-Type":"a"',
    b'"x-request-id":["a","b"]',
    b'"started_at":1.5',
    b'"headers":{}',
]


@st.composite
def _mutated(draw: st.DrawFn, target: str) -> bytes:
    """A seed body with a few edits: a token or random bytes inserted, a span deleted,
    duplicated or overwritten. Mostly bodies that are almost right."""
    body = bytearray(draw(st.sampled_from(seeds()[target])))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(body)))
        span = draw(st.integers(0, 40))
        edit = draw(st.integers(0, 4))
        if edit == 0:
            body[at:at] = draw(st.sampled_from(_TOKENS))
        elif edit == 1:
            body[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif edit == 2:
            del body[at : at + span]
        elif edit == 3:
            body[at:at] = body[at : at + span]
        else:
            body[at : at + 1] = draw(st.sampled_from(_TOKENS))
    return bytes(body)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated("kong"), st.sampled_from(FORMATS), WINDOWS)
def test_mutated_kong_bodies_are_decided_alike_by_both_paths(
    body: bytes, fmt: Any, window: Any
) -> None:
    assert_paths_agree(kong_body, body, fmt, source="fuzz", window=window)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated("ndjson"), WINDOWS)
def test_mutated_ndjson_bodies_are_decided_alike_by_both_paths(body: bytes, window: Any) -> None:
    assert_paths_agree(ndjson_body, body, source="fuzz", window=window)


# ---------------------------------------------------------------------- the service


class _Sent:
    """Stands in for the producer: keeps what a request would have written, and builds
    each dead letter as the producer does."""

    def __init__(self) -> None:
        self.accepted: list[Accepted] = []
        self.rejected: list[Rejected] = []

    async def send(
        self, accepted: list[Accepted], rejected: list[Rejected], *, source: str | None = None
    ) -> Delivery:
        for r in rejected:
            encode(dead_letter(r.raw, r.error, source or "fuzz", 1_764_403_200_000))
        self.accepted, self.rejected = list(accepted), list(rejected)
        return Delivery(records=len(accepted) + len(rejected), failed=0)


@functools.cache
def _loop() -> asyncio.AbstractEventLoop:
    return asyncio.new_event_loop()


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[TestClient[Any, Any], _Sent]]:
    settings = IngestSettings.load(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        ingest={"max_body_bytes": 256 * 1024, "insecure_no_auth": True},
    )
    app = IngestService(settings)
    sent = _Sent()
    app.producer.send = sent.send  # type: ignore[method-assign]
    client: TestClient[Any, Any] = TestClient(TestServer(app.app()), loop=_loop())
    _loop().run_until_complete(client.start_server())
    try:
        yield client, sent
    finally:
        _loop().run_until_complete(client.close())
        app.producer.close(0)


def _entries(path: str, body: bytes) -> int | None:
    """How many entries the body holds, where that is plain without the service."""
    if path == "/v1/events":
        return sum(1 for line in body.split(b"\n") if line.rstrip(b"\r").strip())
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None  # split entry by entry, or a 400
    return len(value) if isinstance(value, list) else 1 if isinstance(value, dict) else None


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.sampled_from(["/v1/kong", "/v1/events"]).flatmap(
        lambda path: st.tuples(
            st.just(path),
            _mutated("kong" if path == "/v1/kong" else "ndjson") | st.binary(max_size=64),
        )
    )
)
def test_the_service_answers_every_body_and_decides_every_entry(
    service: tuple[TestClient[Any, Any], _Sent], case: tuple[str, bytes]
) -> None:
    """No 500: each entry is accepted (a valid event) or dead-lettered with a reason."""
    client, sent = service
    path, body = case
    sent.accepted, sent.rejected = [], []

    async def post() -> tuple[int, Any]:
        r = await client.post(path, data=body)
        return r.status, await r.json()

    status, answer = _loop().run_until_complete(post())
    assert status in (200, 400), (status, answer)
    if status == 400:
        assert answer["error"]
        return
    assert (answer["accepted"], answer["rejected"]) == (len(sent.accepted), len(sent.rejected))
    expected = _entries(path, body)
    if expected is not None:
        assert answer["accepted"] + answer["rejected"] == expected
    for a in sent.accepted:
        event = validate(SnapshotEvent, orjson.loads(a.value))
        assert (event.event_id, event.doc_type) == (a.event_id, a.doc_type)
    for r in sent.rejected:
        assert r.error.problems
        assert r.error.first_field
        assert str(r.error)
