"""The pure parts of grouping (``alerting/grouping.py``), its ``[grouping]`` settings and the
state file's schema 4."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from anchorwatch.alerting.grouping import (
    GROUP_WAIT,
    clusters,
    group_id,
    group_view,
    hold_kind,
    inhibitor,
    new_group,
    quality_code,
    with_member,
)
from anchorwatch.alerting.integrations.slack.render import slack_parent
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import FILENAME, IncidentRow, Store
from anchorwatch.contracts import Reason
from anchorwatch.settings import SettingsError
from tests.support.alerting import T0


def _row(doc_type: str, opened_at_ms: int, severity: str = "warning") -> IncidentRow:
    return IncidentRow(
        incident_id=f"i-{doc_type}",
        doc_type=doc_type,
        rule="drift",
        state="open",
        severity=severity,
        opened_at_ms=opened_at_ms,
        resolved_at_ms=None,
        record={"peak_mean_drift": 0.9, "threshold": 0.85},
        next_seq=2,
        last_update_window_ms=opened_at_ms,
        updated_ms=0,
        quality_code="snapshot_disabled",
    )


def test_the_quality_code_is_the_first_configured_one_present() -> None:
    reasons = [Reason(code="above_threshold", message=""), Reason(code="zero_anchors", message="")]
    assert quality_code(reasons, ["snapshot_disabled", "zero_anchors"]) == "zero_anchors"
    assert quality_code(reasons, ["snapshot_disabled"]) is None
    assert quality_code([], ["zero_anchors"]) is None


def test_holds_are_told_apart_by_what_holds_them() -> None:
    assert hold_kind(GROUP_WAIT) == "group-wait"
    assert hold_kind("inhibited by i1-abc") == "inhibited"
    assert inhibitor("inhibited by i1-abc") == "i1-abc"
    assert hold_kind("silence 12 (doc type 'x')") == "silence"
    assert inhibitor("silence 12 (doc type 'x')") is None
    assert inhibitor(None) is None


def test_clusters_cut_where_an_opening_is_too_far_from_its_clusters_first() -> None:
    rows = [_row("c", 200_000), _row("a", 0), _row("b", 60_000), _row("d", 500_000)]
    cut = clusters(rows, within_ms=300_000)
    assert [[r.doc_type for r in c] for c in cut] == [["a", "b", "c"], ["d"]]
    assert [len(c) for c in clusters(rows, within_ms=0)] == [1, 1, 1, 1]


def test_a_group_id_is_the_same_for_the_same_first_window_and_differs_otherwise() -> None:
    assert group_id("zero_anchors", 1) == group_id("zero_anchors", 1)
    assert group_id("zero_anchors", 1) != group_id("zero_anchors", 2)
    assert group_id("zero_anchors", 1) != group_id("snapshot_disabled", 1)


def test_a_group_resolves_with_its_last_member_and_takes_the_worst_severity() -> None:
    members = [_row("a", 0), _row("b", 0)]
    group = new_group("snapshot_disabled", members, now_ms=5)
    assert group.severity == "warning"
    assert group.opened_at_ms == 0
    group = with_member(group, _row("c", 60_000, "critical"), "open", now_ms=6)
    assert group.severity == "critical"
    group = with_member(group, members[0], "resolved", now_ms=7)
    assert group.state == "open"
    for row in (members[1], _row("c", 60_000, "critical")):
        group = with_member(group, row, "resolved", now_ms=8)
    assert group.state == "resolved"
    assert group.resolved_at_ms == 8


def test_the_group_message_lists_a_bounded_number_of_types_and_counts_them_all() -> None:
    members = [_row(f"type_{i:03d}_{'x' * 30}", T0) for i in range(200)]
    group = with_member(new_group("zero_anchors", members, T0), members[5], "resolved", T0)
    view = group_view(group, "opened", None, "200 doc types: zero_anchors")
    assert view.kind == "group"
    assert view.code == "zero_anchors"
    assert view.doc_type == "zero_anchors: 200 doc types"
    assert len(view.members) == 200
    assert view.members[0] == (members[0].doc_type, "open")
    assert view.members[5] == (members[5].doc_type, "recovered")
    assert [r.code for r in view.reasons] == ["group_change"]  # the types are not reasons
    # What Slack shows of them: bounded, counted.
    (listing,) = [b["text"]["text"] for b in slack_parent(view).blocks if "*Open* (199)" in str(b)]
    assert len(listing) <= 3_000
    assert listing.startswith(f"*Open* (199): `{members[0].doc_type}`")
    shown = listing.split("\n")[0].count("`") // 2
    assert listing.split("\n")[0].endswith(f" (+{199 - shown} more)")
    assert f"*Recovered* (1): `{members[5].doc_type}`" in listing


def test_grouping_settings_refuse_bad_values_naming_the_field() -> None:
    with pytest.raises(SettingsError, match=r"grouping\.min_types"):
        AlertingSettings.load(grouping={"min_types": 1})
    with pytest.raises(SettingsError, match=r"grouping\.codes.*'drift' is not a data-quality"):
        AlertingSettings.load(grouping={"codes": ["drift"]})
    with pytest.raises(SettingsError, match=r"grouping\.wait_s"):
        AlertingSettings.load(grouping={"wait_s": -1})


def test_a_state_file_of_schema_3_is_brought_to_4(tmp_path: Path) -> None:
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / FILENAME)
    db.executescript(
        "ALTER TABLE incidents DROP COLUMN quality_code; ALTER TABLE incidents DROP COLUMN "
        "group_id; ALTER TABLE incidents DROP COLUMN wait_until_ms;"
        "UPDATE meta SET value = '3' WHERE key = 'schema_version';"
    )
    db.close()
    store = Store(tmp_path)
    assert store.meta_get("schema_version") == "4"
    store.close()
    db = sqlite3.connect(tmp_path / FILENAME)
    columns = {r[1] for r in db.execute("PRAGMA table_info(incidents)")}
    assert {"quality_code", "group_id", "wait_until_ms"} <= columns
    db.close()
