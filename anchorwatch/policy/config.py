"""The detection policy's configuration: how baselines are fitted and when incidents open.

One ``PolicyConfig`` is shared by everything that judges drift (the baseline fit, the Flink
job's static fallback, the incident machine, the backtest), so a TOML ``[policy]`` section
or ``ANCHORWATCH_POLICY__<FIELD>`` variables tune them all at once. Validated at load, with
errors that name the field (``rules[1].open_after: ...``).

The threshold figures themselves are not configured per type: the fit derives them from each
type's own spread with the sensitivities below and stores them in the baseline record. An
owner may pin a type's figures instead (``pins``, or ``anchorwatch baseline pin``): a pin
wins over the fitted figures wherever a window is judged, and no refit overwrites it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from anchorwatch.contracts import Baseline, BaselinePin
from anchorwatch.contracts.models import PIN_REASON_MAX_CHARS, DocType, pin_problem
from anchorwatch.errors import AnchorwatchError
from anchorwatch.policy.window import StaticRule
from anchorwatch.settings import Section

Seasonality = Literal["auto", "hour_of_day", "off"]
Comparison = Literal["baseline", "static"]


class PolicyConfigError(AnchorwatchError, ValueError):
    """A policy configuration that cannot be used; the message names every bad field."""


class PinError(AnchorwatchError, ValueError):
    """A pin that cannot be made; the message names the field and says why."""


class PinConfig(Section):
    """An owner's decision for one doc type, which no refit overwrites (``[policy.pins]``)."""

    threshold: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="A fixed warning threshold: the type is judged by it alone, like a static "
        "rule (no hourly profile, pooled evidence or adaptation).",
    )
    critical_threshold: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="A fixed critical threshold (with threshold). Unset: as far above "
        "threshold as the type's critical threshold was above its warning threshold.",
    )
    min_requests: int | None = Field(
        None,
        ge=1,
        description="Windows with fewer requests do not count: not judged alone, not pooled.",
    )
    mute: bool = Field(False, description="Judged, but never opens an incident.")
    reason: str | None = Field(
        None,
        max_length=PIN_REASON_MAX_CHARS,
        pattern=r"^[^\x00-\x1f\x7f]*$",
        description="Why: shown by `anchorwatch baseline show` and in the verdicts' reasons.",
    )

    @model_validator(mode="after")
    def _something_pinned(self) -> Self:
        problem = pin_problem(self.threshold, self.critical_threshold, self.min_requests, self.mute)
        if problem is not None:
            raise ValueError(problem)
        return self

    def pin(self) -> BaselinePin:
        """The pin as the judges read it."""
        return BaselinePin(
            threshold=self.threshold,
            critical_threshold=self.critical_threshold,
            min_requests=self.min_requests,
            mute=self.mute,
            source="settings",
            reason=self.reason,
        )


_DOC_TYPE: TypeAdapter[str] = TypeAdapter(DocType)


def pin_doc_type(text: str) -> str:
    """``text`` as the contracts hold a doc type (NFC); ``PinError`` says why it is none."""
    try:
        return _DOC_TYPE.validate_python(text)
    except ValidationError as exc:
        raise PinError(f"doc_type: {exc.errors()[0]['msg']}") from None


def new_pin(
    *,
    doc_type: str,
    threshold: float | None,
    critical_threshold: float | None,
    min_requests: int | None,
    mute: bool,
    reason: str | None,
    author: str | None,
    now_ms: int,
) -> tuple[str, BaselinePin]:
    """The doc type (as the contracts hold it) and a pin made by a person now; ``PinError``
    names the first field that is wrong."""
    doc_type = pin_doc_type(doc_type)
    for name, value in (("threshold", threshold), ("critical_threshold", critical_threshold)):
        if value is not None and not 0.0 < value <= 1.0:
            raise PinError(f"{name}: must be above 0 and at most 1, got {value}")
    if min_requests is not None and min_requests < 1:
        raise PinError(f"min_requests: must be at least 1, got {min_requests}")
    problem = pin_problem(threshold, critical_threshold, min_requests, mute)
    if problem is not None:
        raise PinError(problem)
    try:
        pin = BaselinePin(
            threshold=threshold,
            critical_threshold=critical_threshold,
            min_requests=min_requests,
            mute=mute,
            source="command",
            author=(author or "").strip() or None,
            reason=(reason or "").strip() or None,
            pinned_at_ms=now_ms,
        )
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in err["loc"]) or "pin"
        raise PinError(f"{field}: {err['msg']}") from None
    return doc_type, pin


class StaticRuleConfig(Section):
    """Fixed figures for a rule that ignores baselines, and the fallback for types without one."""

    threshold: float = Field(
        0.85, ge=0.0, le=1.0, description="A window mean above this breaches (warning)."
    )
    critical_threshold: float = Field(
        0.9, ge=0.0, le=1.0, description="A window mean above this is critical."
    )
    min_requests: int = Field(
        6, ge=1, description="Windows with fewer requests are not judged (source: count > 5)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.critical_threshold < self.threshold:
            raise ValueError("critical_threshold: must not be below threshold")
        return self

    def rule(self) -> StaticRule:
        return StaticRule(self.threshold, self.critical_threshold, self.min_requests)


class RuleConfig(Section):
    """One way of turning window judgements into incidents (a doc type has one incident per
    rule at a time). ``compare="baseline"`` judges windows against the type's fitted baseline
    (``static`` when the type has none); ``compare="static"`` always uses ``static``."""

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Names the rule in incidents and ids; keep it stable.",
    )
    compare: Comparison = Field("baseline", description="baseline or static.")
    static: StaticRuleConfig = Field(
        default_factory=StaticRuleConfig,
        description="The figures of a static rule, or the fallback of a baseline rule.",
    )
    open_after: int = Field(
        2, ge=1, le=1440, description="Consecutive breaching windows that open an incident."
    )
    open_after_critical: int = Field(
        2,
        ge=1,
        le=1440,
        description="Consecutive critical windows that open an incident (or escalate an "
        "open one to critical). 2: a single critical window is not enough, real series have "
        "heavy-tailed one-window spikes; only one beyond anything the type's history showed "
        "(its baseline's extreme_threshold) opens alone. Defaults to open_after when that "
        "is 1.",
    )
    resolve_after: int = Field(
        3, ge=1, le=1440, description="Consecutive clean windows that resolve an incident."
    )
    recovery_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="While an incident is open, a window counts towards resolving it only "
        "at or below center + this share of the margin (threshold - center): separate "
        "trigger and recovery levels, so a type hovering at its threshold keeps one incident "
        "instead of flapping. 1.0: the threshold itself.",
    )
    reopen_within: int = Field(
        30,
        ge=0,
        le=10_080,
        description="An incident that breaches again within this many windows of resolving "
        "is re-opened (same id) instead of a new one being opened.",
    )
    resolve_when_silent: int = Field(
        30,
        ge=1,
        le=10_080,
        description="Resolve an open incident after this many windows without a conclusive "
        "window (no traffic, or too few requests and no pooled evidence).",
    )
    adapt_after: int = Field(
        120,
        ge=0,
        le=100_000,
        description="Accept a level shift as the type's new normal after this many windows "
        "of an open incident sitting at a stable new level (most windows breaching, no "
        "trend): the incident resolves as 'adapted' and the type is judged against its "
        "baseline moved to the new level until a refit replaces it. 0: never adapt.",
    )
    pooling: bool = Field(
        True,
        description="Pool evidence across windows (CUSUM) so sparse types are judged too; "
        "baseline rules only.",
    )
    storm_after: int = Field(
        3,
        ge=0,
        le=1000,
        description="A type that pages this many times within a day is noisy: that page "
        "opens one incident that says so and stays open (further excursions are counted, "
        "not paged) until storm_quiet windows pass without a breach. 0: never.",
    )
    storm_quiet: int = Field(
        120,
        ge=1,
        le=100_000,
        description="Windows without a breach that resolve a noisy type's incident.",
    )

    @model_validator(mode="before")
    @classmethod
    def _critical_default(cls, data: Any) -> Any:
        # The default (2) follows a smaller open_after: open_after = 1 alone is valid.
        if isinstance(data, Mapping) and "open_after_critical" not in data:
            after = data.get("open_after", 2)
            if isinstance(after, int) and after < 2:
                return {**data, "open_after_critical": after}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.open_after_critical > self.open_after:
            raise ValueError(
                "open_after_critical: must not exceed open_after (critical is the stronger "
                "evidence)"
            )
        if self.pooling and self.compare == "static":
            raise ValueError("pooling: needs compare='baseline' (a static rule has no spread)")
        return self


def _default_rules() -> tuple[RuleConfig, ...]:
    return (RuleConfig(name="drift"),)


class PolicyConfig(Section):
    """Fit (how thresholds follow from a type's history) and detection (how windows become
    incidents). Every figure a window is compared with ends up in the baseline record."""

    version: str = Field(
        "p1",
        min_length=1,
        max_length=32,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Part of every incident id: bump it when a change should start new "
        "incidents instead of continuing the old ones.",
    )
    # ---- fit: thresholds from each type's own spread
    sensitivity: float = Field(
        4.0,
        gt=0.0,
        le=50.0,
        description="Warning threshold = center + sensitivity x spread (spread of a window "
        "mean at the type's typical request count).",
    )
    critical_sensitivity: float = Field(
        8.0, gt=0.0, le=100.0, description="Critical threshold = center + this x spread."
    )
    min_margin: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="The warning threshold is at least this far above the center (drift "
        "units): smaller rises do not matter to anyone, however significant.",
    )
    critical_min_margin: float = Field(
        0.2, ge=0.0, le=1.0, description="The critical threshold is at least this far above."
    )
    threshold_floor: float = Field(
        0.0, ge=0.0, le=1.0, description="No type's warning threshold is below this drift."
    )
    significance: float = Field(
        3.0,
        gt=0.0,
        le=20.0,
        description="min_requests is the smallest n at which the margin (threshold - center) "
        "is this many standard errors of an n-request window mean.",
    )
    min_requests_floor: int = Field(
        3, ge=1, le=10_000, description="No type judges a window on fewer requests than this."
    )
    min_windows: int = Field(
        60,
        ge=2,
        le=10_000_000,
        description="Windows a type needs to get a fitted baseline; with fewer it is marked "
        "insufficient_history and the static rule applies.",
    )
    seasonality: Seasonality = Field(
        "auto",
        description="hour_of_day: fit a center per UTC hour when the history allows; auto: "
        "only when that also narrows the spread by seasonal_min_gain; off: never.",
    )
    seasonal_min_days: int = Field(
        1, ge=1, le=365, description="Distinct days each hour of day must be seen on."
    )
    seasonal_shrinkage: float = Field(
        0.5,
        ge=0.0,
        le=100.0,
        description="Short histories use what they have: each hour's offset from the flat "
        "center is weighted days / (days + this), so one day of history counts for 2/3 of "
        "its profile, three days for 6/7; 0: no shrinkage.",
    )
    weekly_min_weeks: int = Field(
        2,
        ge=2,
        le=52,
        description="Weeks of history (each day of the week seen this often) before a "
        "weekly cycle is fitted: per day-of-week offsets on top of the hourly profile.",
    )
    seasonal_min_windows_per_hour: int = Field(
        30,
        ge=1,
        le=100_000,
        description="Windows each hour of day needs (or half its slots on the days it was "
        "seen, for windows longer than a minute).",
    )
    seasonal_min_gain: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="auto: share by which the hourly profile must narrow the spread.",
    )
    tail_quantile: float = Field(
        0.99,
        ge=0.5,
        lt=1.0,
        description="The spread is at least what this upper quantile of the history's "
        "window means implies for a normal tail (isolated spikes included, sustained "
        "excursions excluded): heavy-tailed, skewed or flat-with-spikes types get wider "
        "thresholds, never a spread of zero.",
    )
    page_budget: float = Field(
        1.0,
        gt=0.0,
        le=1000.0,
        description="Pages per type per week its own history may raise: the fit replays the "
        "whole history (ordinary highs included) through the policy and raises the "
        "type's thresholds until the replay pages at most this often outside the sustained "
        "excursions it leaves out; its spike record is read past a short history at this "
        "rate (peaks over threshold).",
    )
    # ---- pooling: evidence from windows too small to judge alone
    pooling_shift: float = Field(
        0.5,
        gt=0.0,
        le=10.0,
        description="The CUSUM is tuned to detect a rise of this share of the margin "
        "(threshold - center); its reference value is half of it.",
    )
    pooling_threshold: float = Field(
        6.0,
        gt=0.0,
        le=1000.0,
        description="The CUSUM statistic, in effective standard errors (correlated windows "
        "count as fewer independent ones), at which pooled evidence counts as a breach; "
        "higher: fewer false alarms, later detection.",
    )
    # ---- detection
    rules: tuple[RuleConfig, ...] = Field(
        default_factory=_default_rules,
        min_length=1,
        description="Detection rules (JSON list in the environment, [[policy.rules]] in TOML).",
    )
    pins: dict[str, PinConfig] = Field(
        default_factory=dict,
        description='Pinned overrides by doc type ([policy.pins."<doc type>"] in TOML): '
        "threshold, critical_threshold, min_requests, mute, reason (see docs/detection.md, "
        '"Pinned overrides"). They win over any baseline; no refit touches a pinned type.',
    )

    @field_validator("pins", mode="before")
    @classmethod
    def _pinned_doc_types(cls, pins: Any) -> Any:
        # Doc types are untrusted text: each key must be one the contracts accept (named
        # escaped, before its table is read), and two keys must not be one type.
        if not isinstance(pins, Mapping):
            return pins
        out: dict[str, Any] = {}
        for key, pin in pins.items():
            if not isinstance(key, str):
                raise ValueError(f"{key!r}: a doc type is text")
            try:
                doc_type = _DOC_TYPE.validate_python(key)
            except ValidationError as exc:
                raise ValueError(f"{key!r}: not a doc type: {exc.errors()[0]['msg']}") from None
            if doc_type in out:
                raise ValueError(f"{key!r}: the same doc type as another key (NFC)")
            out[doc_type] = pin
        return out

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.critical_sensitivity < self.sensitivity:
            raise ValueError("critical_sensitivity: must not be below sensitivity")
        if self.critical_min_margin < self.min_margin:
            raise ValueError("critical_min_margin: must not be below min_margin")
        names = [r.name for r in self.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rules: names must be unique, got {names}")
        return self

    def settings_pins(self) -> dict[str, BaselinePin]:
        """The pins in settings, by doc type, as the judges read them."""
        return {doc_type: pin.pin() for doc_type, pin in self.pins.items()}

    def pin_of(self, doc_type: str, baseline: Baseline | None) -> BaselinePin | None:
        """The pin that holds for ``doc_type``: its settings pin, else its baseline's."""
        pinned = self.pins.get(doc_type)
        if pinned is not None:
            return pinned.pin()
        return baseline.pin if baseline is not None else None

    def without_pins(self) -> PolicyConfig:
        """This policy as a fit replays it: the history judged by the fitted figures."""
        return self.model_copy(update={"pins": {}}) if self.pins else self

    def rule(self, name: str) -> RuleConfig:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)

    @property
    def fallback(self) -> StaticRule:
        """The static rule for types without a fitted baseline (the first baseline rule's)."""
        for r in self.rules:
            if r.compare == "baseline":
                return r.static.rule()
        return StaticRuleConfig().rule()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PolicyConfig:
        """Validate a plain mapping (e.g. a TOML ``[policy]`` table); errors name the field."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise PolicyConfigError(describe_errors(exc, "policy")) from None


def describe_errors(exc: ValidationError, root: str) -> str:
    lines = [f"invalid {root} configuration:"]
    for err in exc.errors(include_url=False, include_input=False):
        path = root
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        msg = str(err["msg"])
        # Cross-field checks raise "field: reason" from a model validator.
        if msg.startswith("Value error, ") and ": " in msg:
            field, _, msg = msg.removeprefix("Value error, ").partition(": ")
            path += f".{field}"
        msg = msg.removeprefix("Value error, ")  # about the whole table
        lines.append(f"  {path}: {msg}")
    return "\n".join(lines)
