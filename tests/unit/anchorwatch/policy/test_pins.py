"""Pinned overrides: an owner's threshold, minimum volume or mute for one doc type, in
settings (``[policy] pins``) or on the baseline record, and how every judge honours them:
the window rule, the incident tracker (live and in the backtest) and the fit, which
ignores them."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from anchorwatch.backtest import backtest
from anchorwatch.contracts import (
    BaselinePin,
    ContractError,
    Reason,
    WindowAggregate,
    decode_baseline,
)
from anchorwatch.contracts import encode as encode_record
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.policy.config import PinError, PolicyConfig, PolicyConfigError, new_pin
from anchorwatch.policy.fitting import fit_baseline, pinned_baseline, unpinned_baseline
from anchorwatch.policy.incident_types import IncidentChange
from anchorwatch.policy.incidents import IncidentTracker
from anchorwatch.policy.window import PINNED, StaticRule, judge_window
from tests.support.policy import T0, baseline, window

MIN = 60_000


def win(minute: int, mean: float, n: int = 40, doc_type: str = "nda") -> WindowAggregate:
    return WindowAggregate(
        doc_type=doc_type,
        window_start_ms=T0 + minute * MIN,
        window_end_ms=T0 + (minute + 1) * MIN,
        request_count=n,
        mean_drift=mean,
    )


def pins(**by_type: Any) -> PolicyConfig:
    return PolicyConfig.from_mapping({"pins": by_type})


def run(t: IncidentTracker, means: list[float], n: int = 40, start: int = 0) -> list[str]:
    changes: list[IncidentChange] = []
    for i, mean in enumerate(means):
        changes += t.observe(win(start + i, mean, n))
    return [c.kind for c in changes]


# --------------------------------------------------------------------------- settings


def test_pins_in_settings_are_keyed_by_doc_type_as_the_contracts_hold_it() -> None:
    policy = pins(**{"Cafe\u0301": {"threshold": 0.7}, "invoice": {"mute": True, "reason": "x"}})
    assert set(policy.pins) == {"Caf\u00e9", "invoice"}  # NFC, as every record's doc type
    assert policy.settings_pins()["invoice"] == BaselinePin(
        mute=True, source="settings", reason="x"
    )
    assert policy.pin_of("Caf\u00e9", None) == BaselinePin(threshold=0.7, source="settings")
    # A settings pin wins over one on the record.
    record = baseline("invoice", pin=BaselinePin(threshold=0.5))
    assert policy.pin_of("invoice", record) == policy.settings_pins()["invoice"]
    assert PolicyConfig().pin_of("invoice", record) == record.pin
    assert policy.without_pins().pins == {}


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"bad\x07": {"mute": True}}, "policy.pins.'bad\\x07': not a doc type: U+0007 (Cc)"),
        ({"\u200b": {"mute": True}}, "policy.pins.'\\u200b': not a doc type"),
        ({"Cafe\u0301": {"mute": True}, "Caf\u00e9": {"mute": True}}, "the same doc type"),
        ({"a": {}}, "policy.pins.a: nothing to pin (give a threshold, min_requests or mute)"),
        ({"a": {"threshold": 1.5}}, "policy.pins.a.threshold: Input should be less than or"),
        ({"a": {"threshold": 0.0}}, "policy.pins.a.threshold: Input should be greater than 0"),
        ({"a": {"min_requests": -3}}, "policy.pins.a.min_requests: Input should be greater"),
        ({"a": {"critical_threshold": 0.9}}, "policy.pins.a.critical_threshold: pinned only"),
        (
            {"a": {"threshold": 0.7, "critical_threshold": 0.6}},
            "policy.pins.a.critical_threshold: must not be below threshold",
        ),
        ({"a": {"threshold": 0.7, "owner": "x"}}, "policy.pins.a.owner: Extra inputs"),
    ],
)
def test_bad_pins_in_settings_are_refused_naming_the_field(
    table: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(PolicyConfigError) as info:
        PolicyConfig.from_mapping({"pins": table})
    assert fragment in str(info.value)


def test_pins_come_from_the_toml_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "anchorwatch.toml"
    config.write_text(
        '[policy.pins."medical report"]\nthreshold = 0.7\nreason = "vendor runs high"\n\n'
        "[policy.pins.invoice]\nmute = true\n",
        encoding="utf-8",
    )
    settings = JobSettings.load(config)
    assert settings.policy.pins["medical report"].threshold == 0.7
    assert settings.policy.pins["invoice"].mute
    monkeypatch.setenv("ANCHORWATCH_POLICY__PINS", '{"nda": {"min_requests": 50}}')
    assert JobSettings.load().policy.settings_pins() == {
        "nda": BaselinePin(min_requests=50, source="settings")
    }


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"threshold": 1.5}, "threshold: must be above 0 and at most 1, got 1.5"),
        ({"threshold": 0.0}, "threshold: must be above 0 and at most 1, got 0.0"),
        ({"threshold": float("nan")}, "threshold: must be above 0 and at most 1, got nan"),
        ({"min_requests": -1}, "min_requests: must be at least 1, got -1"),
        ({"min_requests": 0}, "min_requests: must be at least 1, got 0"),
        ({}, "nothing to pin"),
        ({"threshold": 0.7, "critical_threshold": 1.2}, "critical_threshold: must be above 0"),
        ({"doc_type": "inv\x1boice", "mute": True}, "doc_type: U+001B (Cc) not allowed"),
        ({"doc_type": "  ", "mute": True}, "doc_type: only whitespace"),
        ({"mute": True, "reason": "a\nb"}, "reason: String should match pattern"),
    ],
)
def test_a_pin_made_by_a_person_is_refused_naming_the_field(
    kw: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {
        "doc_type": "invoice",
        "threshold": None,
        "critical_threshold": None,
        "min_requests": None,
        "mute": False,
        "reason": None,
        "author": "ana",
        "now_ms": T0,
    }
    with pytest.raises(PinError, match="^" + re.escape(message)):
        new_pin(**{**args, **kw})


def test_a_pin_travels_on_the_baseline_record_and_is_checked_there_too() -> None:
    doc_type, pin = new_pin(
        doc_type="Cafe\u0301",
        threshold=0.7,
        critical_threshold=None,
        min_requests=20,
        mute=False,
        reason=" vendor runs high ",
        author="ana",
        now_ms=T0,
    )
    assert doc_type == "Caf\u00e9"
    assert (pin.source, pin.author, pin.reason, pin.pinned_at_ms) == (
        "command",
        "ana",
        "vendor runs high",
        T0,
    )
    record = baseline(doc_type, pin=pin)
    assert decode_baseline(encode_record(record)) == record
    wire = orjson.loads(encode_record(record))
    wire["pin"]["threshold"] = 1.5
    with pytest.raises(ContractError) as info:
        decode_baseline(orjson.dumps(wire))
    assert info.value.first_field == "pin.threshold"
    # An older record (no pin) reads as unpinned; a newer reader's pin fields are optional.
    del wire["pin"]
    assert decode_baseline(orjson.dumps(wire)).pin is None


# --------------------------------------------------------------------------- the window rule


def test_a_pinned_threshold_is_the_figure_a_window_is_judged_by() -> None:
    b = baseline(pin=BaselinePin(threshold=0.6, author="ana", reason="vendor runs high"))
    # Above the fitted threshold (0.35), below the pinned one: nothing.
    quiet = judge_window(window(0.5, 40), b)
    assert (quiet.breach_level, quiet.threshold, quiet.rule) == ("none", 0.6, "static")
    assert quiet.baseline_version == "b-test"
    assert quiet.reasons[0].code == PINNED
    assert "by ana: vendor runs high" in quiet.reasons[0].message
    # The critical threshold keeps the fitted gap (0.45 - 0.35) above the pinned one.
    warn, crit = judge_window(window(0.61, 40), b), judge_window(window(0.71, 40), b)
    assert (warn.breach_level, crit.breach_level) == ("warning", "critical")
    assert crit.critical_threshold == pytest.approx(0.7)
    # Too few requests (the fitted 10) are not judged, however significant.
    assert judge_window(window(0.99, 9), b).breach_level == "none"


def test_a_pinned_threshold_does_not_move_with_the_hour() -> None:
    fitted = baseline(hourly_center=[0.5] * 24)  # every hour 0.2 above the flat center
    b = fitted.model_copy(update={"pin": BaselinePin(threshold=0.6)})
    assert judge_window(window(0.55, 40), fitted).threshold == pytest.approx(0.55)
    assert judge_window(window(0.55, 40), b).threshold == 0.6


def test_a_pinned_critical_threshold_and_minimum_volume_are_used_as_given() -> None:
    b = baseline(pin=BaselinePin(threshold=0.6, critical_threshold=0.95, min_requests=100))
    j = judge_window(window(0.9, 150), b)
    assert (j.breach_level, j.critical_threshold, j.min_requests) == ("warning", 0.95, 100)
    assert judge_window(window(0.9, 99), b).breach_level == "none"
    # A threshold pinned for a type without a baseline keeps the static rule's gap.
    no_baseline = judge_window(window(0.7, 40), None, StaticRule(), pin=BaselinePin(threshold=0.5))
    assert (no_baseline.breach_level, no_baseline.critical_threshold) == ("critical", 0.55)


def test_a_pinned_minimum_volume_leaves_smaller_windows_unjudged() -> None:
    fitted = baseline()
    # Unpinned: 9 requests are under the fitted 10, but 0.9 is far enough up to count.
    assert judge_window(window(0.9, 9), fitted).breach_level == "critical"
    b = fitted.model_copy(update={"pin": BaselinePin(min_requests=50)})
    assert judge_window(window(0.9, 49), b).breach_level == "none"
    j = judge_window(window(0.4, 50), b)  # the fitted threshold (0.35) still applies
    assert (j.breach_level, j.min_requests, j.rule) == ("warning", 50, "baseline")
    static = judge_window(window(0.9, 7), None, pin=BaselinePin(min_requests=8))
    assert (static.breach_level, static.min_requests) == ("none", 8)


def test_a_pin_in_settings_wins_over_the_records_own() -> None:
    b = baseline(pin=BaselinePin(threshold=0.9))
    assert judge_window(window(0.5, 40), b, pin=BaselinePin(threshold=0.45)).threshold == 0.45


# --------------------------------------------------------------------------- the tracker


def sparse_windows(shift: float, seed: int = 21) -> list[WindowAggregate]:
    rng = random.Random(seed)
    out = []
    for m in range(70):
        n = sum(1 for _ in range(3) if rng.random() < 0.35)
        if n:
            up = shift if m >= 60 else 0.0
            mean = sum(rng.gauss(0.30 + up, 0.06) for _ in range(n)) / n
            out.append(win(m, min(1.0, max(0.0, mean)), n=n, doc_type="sparse"))
    return out


def sparse_baseline(**kw: Any) -> Any:
    return baseline(
        "sparse", spread=0.06, typical_request_count=1.0, threshold=0.54,
        critical_threshold=0.78, min_requests=3, **kw,
    )  # fmt: skip


def test_a_pinned_threshold_pages_at_the_threshold_and_pools_no_evidence_below_it() -> None:
    windows = sparse_windows(shift=0.14)
    unpinned = IncidentTracker(PolicyConfig(), {"sparse": sparse_baseline()})
    assert [c.kind for w in windows for c in unpinned.observe(w)] == ["opened"]  # pooled
    pinned = IncidentTracker(
        pins(sparse={"threshold": 0.54, "min_requests": 1}), {"sparse": sparse_baseline()}
    )
    assert [c for w in windows for c in pinned.observe(w)] == []
    # Windows above the pinned threshold open an incident by the rule's run, as a static
    # rule does; it resolves on windows back under the threshold.
    t = IncidentTracker(pins(nda={"threshold": 0.6}), {"nda": baseline()})
    assert run(t, [0.5, 0.5, 0.61, 0.62, 0.5, 0.5, 0.5]) == ["opened", "resolved"]
    assert t.open_incidents() == []


def test_a_pin_on_the_record_reaches_the_tracker_with_the_record() -> None:
    t = IncidentTracker(PolicyConfig(), {"nda": baseline()})
    assert run(t, [0.5, 0.5, 0.3, 0.3, 0.3]) == ["opened", "resolved"]
    t.set_baseline(baseline(t0=T0 + 1, pin=BaselinePin(threshold=0.6)))
    assert t.pin("nda") == BaselinePin(threshold=0.6)
    assert run(t, [0.5] * 40, start=60) == []


def test_a_pinned_threshold_is_never_adapted_away() -> None:
    policy = PolicyConfig.from_mapping(
        {"rules": [{"name": "drift", "adapt_after": 10, "pooling": False}]}
    )
    shifted = [0.65] * 40
    adapting = IncidentTracker(policy, {"nda": baseline()})
    assert "resolved" in run(adapting, shifted)  # the level was accepted ("adapted")
    policy = policy.model_copy(update={"pins": pins(nda={"threshold": 0.6}).pins})
    fixed = IncidentTracker(policy, {"nda": baseline()})
    assert run(fixed, shifted) == ["opened"]  # still open: the owner's 0.6 stands


def test_a_pinned_minimum_volume_keeps_small_windows_out_of_the_pooled_evidence() -> None:
    windows = sparse_windows(shift=0.2)
    t = IncidentTracker(pins(sparse={"min_requests": 3}), {"sparse": sparse_baseline()})
    assert [c for w in windows for c in t.observe(w)] == []


def test_a_muted_type_is_judged_but_never_opens_an_incident() -> None:
    policy = PolicyConfig.from_mapping(
        {
            "pins": {"nda": {"mute": True}},
            "rules": [
                {"name": "drift"},
                {
                    "name": "sustained",
                    "compare": "static",
                    "pooling": False,
                    "static": {"threshold": 0.9, "critical_threshold": 0.9, "min_requests": 1},
                },
            ],
        }
    )
    t = IncidentTracker(policy, {"nda": baseline()})
    assert run(t, [0.95] * 10) == []  # neither rule opens
    other = IncidentTracker(policy, {"pdf": baseline("pdf")})
    assert [c.kind for i in range(4) for c in other.observe(win(i, 0.95, doc_type="pdf"))] == [
        "opened",
        "opened",
    ]


def test_an_incident_open_when_the_mute_arrives_runs_its_course() -> None:
    t = IncidentTracker(PolicyConfig(), {"nda": baseline()})
    assert run(t, [0.5, 0.5]) == ["opened"]
    t.set_baseline(baseline(t0=T0 + 1, pin=BaselinePin(mute=True)))
    # (The pooled evidence the incident banked takes a few clean windows to run down.)
    assert run(t, [0.5, 0.5] + [0.3] * 8, start=2) == ["resolved"]
    assert t.open_incidents() == []
    assert run(t, [0.5] * 5, start=12) == []  # not even re-opened


def test_the_backtest_judges_with_the_pins_in_settings() -> None:
    history = [win(i, 0.30 + 0.01 * (i % 5)) for i in range(120)]
    drift = [win(120 + i, 0.6) for i in range(10)]
    policy = PolicyConfig(min_windows=30)
    plain = backtest(history + drift, policy, fit_until_ms=T0 + 120 * MIN)
    assert [i.doc_type for i in plain.incidents] == ["nda"]
    muted = policy.model_copy(update={"pins": pins(nda={"mute": True}).pins})
    quiet = backtest(history + drift, muted, fit_until_ms=T0 + 120 * MIN)
    assert quiet.incidents == []
    # The fit itself knows nothing of pins: the same baselines either way.
    assert quiet.baselines == plain.baselines


# --------------------------------------------------------------------------- the records


def test_the_pinned_record_keeps_the_fitted_figures_and_is_newer_than_the_held_one() -> None:
    held = baseline()
    pin = BaselinePin(threshold=0.7, author="ana", pinned_at_ms=T0 + 5 * MIN)
    record = pinned_baseline(held, "nda", pin, PolicyConfig(), now_ms=T0 + 5 * MIN)
    assert record.pin == pin
    assert record.fitted_at_ms == T0 + 5 * MIN
    assert record.version != held.version
    kept = record.model_dump(exclude={"pin", "fitted_at_ms", "version"})
    assert kept == held.model_dump(exclude={"pin", "fitted_at_ms", "version"})
    back = unpinned_baseline(record, now_ms=T0 + 9 * MIN)
    assert (back.pin, back.fitted_at_ms) == (None, T0 + 9 * MIN)
    assert back.version not in (held.version, record.version)
    assert back.threshold == held.threshold


def test_a_type_without_a_baseline_is_pinned_on_a_record_of_no_history() -> None:
    record = pinned_baseline(None, "new", BaselinePin(mute=True), PolicyConfig(), now_ms=T0)
    assert (record.status, record.window_count, record.threshold) == (
        "insufficient_history",
        0,
        0.85,
    )
    assert decode_baseline(encode_record(record)) == record


def test_a_fit_ignores_the_pins_in_settings() -> None:
    ws = [win(i, 0.30 + 0.02 * (i % 7), n=20 + i % 9) for i in range(240)]
    ws[100:104] = [win(100 + i, 0.7) for i in range(4)]
    kw = {"fitted_at_ms": T0, "history_start_ms": T0, "history_end_ms": T0 + 240 * MIN}
    plain = fit_baseline("nda", ws, PolicyConfig(min_windows=60), **kw)
    pinned = fit_baseline(
        "nda",
        ws,
        PolicyConfig(min_windows=60, pins=pins(nda={"mute": True, "threshold": 0.99}).pins),
        **kw,
    )
    assert pinned == plain
    assert plain.baseline.pin is None


def test_the_tracker_takes_the_jobs_judgement_only_when_made_by_the_same_pin() -> None:
    policy = pins(nda={"threshold": 0.6})
    t = IncidentTracker(policy, {"nda": baseline()})
    # A job without the pin (another deploy of settings) judged 0.5 a warning: re-judged.
    unpinned = [judge_window(win(i, 0.5), baseline()) for i in range(3)]
    assert [c for i, j in enumerate(unpinned) for c in t.observe(win(i, 0.5), j)] == []
    # A job with the same pin: its judgement stands, its own diagnoses with it.
    pin = policy.settings_pins()["nda"]
    same = [judge_window(win(i, 0.7), baseline(), pin=pin) for i in (3, 4)]
    assert [r.code for r in same[0].reasons] == [PINNED, "above_threshold"]
    diagnosed = [
        replace(j, reasons=[*j.reasons, Reason(code="zero_anchors", message="x")]) for j in same
    ]
    (opened,) = [
        c for i, j in zip((3, 4), diagnosed, strict=True) for c in t.observe(win(i, 0.7), j)
    ]
    assert opened.judgement is not None
    assert "zero_anchors" in [r.code for r in opened.judgement.reasons]
