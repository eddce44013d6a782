"""The engine of an instance that shares the work (``Engine(partitions=...)``): it restores
and decides only the types of the partitions it owns, and stores each partition's event time
under a key of its own, so instances that own other partitions never write over it."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from anchorwatch.alerting.engine import WATERMARK, Engine, RawMessage
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.store import Store
from anchorwatch.contracts import encode
from tests.support.alerting import lifecycle
from tests.support.alerting_harness import settings_for

TOPIC = "verdicts"


def engine(tmp_path: Path, partitions: frozenset[int] | None = None) -> Engine:
    settings = settings_for(tmp_path, None, None)
    metrics = ServiceMetrics(CollectorRegistry())
    clock = ManualClock(1_800_000_000.0)
    return Engine(
        settings, Store(tmp_path / "state"), metrics, ["events"], clock=clock, partitions=partitions
    )


def test_an_engine_of_some_partitions_restores_and_decides_only_their_types(
    tmp_path: Path,
) -> None:
    everything = engine(tmp_path)
    placed = [(p, v) for p, doc in ((0, "on-zero"), (1, "on-one")) for v in lifecycle(doc)[:3]]
    messages = [RawMessage(TOPIC, p, offset, encode(v)) for offset, (p, v) in enumerate(placed)]
    everything.process(messages, 1)
    assert {r.doc_type for r in everything.open_incidents()} == {"on-zero", "on-one"}
    meta = everything.store.restore().meta
    assert {k for k in meta if k.startswith(WATERMARK)} == {f"{WATERMARK}0", f"{WATERMARK}1"}
    everything.close()

    one = engine(tmp_path, frozenset({1}))
    assert {r.doc_type for r in one.open_incidents()} == {"on-one"}
    assert set(one.offsets) == {(TOPIC, 1)}
    assert one.last_window_start_ms("on-zero") is None
    assert one.last_window_start_ms("on-one") == lifecycle("on-one")[2].window.window_start_ms
    assert one.watermark_ms == int(meta[f"{WATERMARK}1"])
    # Its next batch writes partition 1's keys alone: partition 0's stay as they were.
    one.process([RawMessage(TOPIC, 1, 99, encode(lifecycle("on-one")[3]))], 2)
    after = one.store.restore().meta
    assert after[f"{WATERMARK}0"] == meta[f"{WATERMARK}0"]
    assert int(after[f"{WATERMARK}1"]) > int(meta[f"{WATERMARK}1"])
    one.close()

    none = engine(tmp_path, frozenset())
    assert none.open_incidents() == []
    assert none.offsets == {}
    none.close()


def test_event_time_stored_by_an_earlier_version_is_read(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    store.meta_set("watermarks", '{"0": 120000, "1": 180000}')
    store.meta_set(f"{WATERMARK}1", "240000")
    store.close()
    restored = engine(tmp_path, frozenset({0, 1}))
    assert restored.watermark_ms == 240_000
    restored.close()
    assert engine(tmp_path, frozenset({0})).watermark_ms == 120_000
