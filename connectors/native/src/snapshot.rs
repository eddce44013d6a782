//! A snapshot event against the contract: the bounds of `anchorwatch.contracts.models` as
//! constants, the values of an event and its anchors as read (from a Kong entry or an NDJSON
//! line), and the checks that decide whether the contract surely accepts them; where the
//! reference might answer differently, a check refuses. `contract()` in the crate root
//! describes these bounds to Python.

use std::borrow::Cow;

// anchorwatch.contracts.models: EpochMillis, Identifier, DocType, ModelVersion, SnapshotEvent,
// AnchorSnapshot.
pub(crate) const EPOCH_MS_GE: i64 = 946_684_800_000;
pub(crate) const EPOCH_MS_LT: i64 = 4_102_444_800_000;
pub(crate) const IDENTIFIER_MAX_CHARS: usize = 200;
pub(crate) const DOC_TYPE_MAX_CHARS: usize = 512;
pub(crate) const MODEL_VERSION_MAX_CHARS: usize = 128;
pub(crate) const RECOMMENDATION_MAX_CHARS: usize = 64;
pub(crate) const SOURCE_MAX_CHARS: usize = 200;
pub(crate) const ANCHOR_COUNT_LE: i64 = 100_000;
pub(crate) const ANCHORS_MAX: usize = 10_000;
pub(crate) const SNAPSHOT_STATUSES: [&str; 2] = ["active", "disabled"];
pub(crate) const RESAMPLE: &str = "re-sample";
// anchorwatch.contracts.breakdown: LATENCY_MAX_MS, ANCHOR_KINDS, OTHER_KIND (KINDS is both,
// in the order they are written), TOP_ANCHORS_PER_EVENT.
pub(crate) const LATENCY_MAX_MS: i64 = 3_600_000;
pub(crate) const KINDS: [&str; 8] = [
    "SECTION",
    "ENTITY",
    "TABLE",
    "LIST",
    "CONDITION",
    "TIMELINE",
    "REFERENCE",
    "OTHER",
];
pub(crate) const TOP_ANCHORS_PER_EVENT: usize = 3;
// serde_json writes floats from 1e16 up as `1e16`, where orjson writes `1e+16`; below,
// both write the same shortest text. Larger values take the reference path.
const FLOAT_BELOW: f64 = 1e16;

/// One anchor of a snapshot (`AnchorSnapshot`), as read.
pub(crate) struct Anchor<'a> {
    pub(crate) anchor_id: Cow<'a, str>,
    pub(crate) position: i64,
    pub(crate) l2_norm: f64,
    pub(crate) cosine_angle: f64,
    pub(crate) kl_divergence: f64,
    pub(crate) drift_score: f64,
    pub(crate) recommendation: Cow<'a, str>,
}

/// A JSON string the contract's `Identifier`/`DocType` pattern accepts: no control characters.
fn printable(text: &str) -> bool {
    !text.bytes().any(|b| b < 0x20 || b == 0x7f)
}

/// A doc type (or model version) the contract's `doc_type_text` surely takes unchanged: printable ASCII (in
/// NFC, no control, format or separator characters) and not only spaces. Anything else,
/// any non-ASCII letter included, is for the reference path.
fn plain_doc_type(text: &str) -> bool {
    text.bytes().all(|b| (0x20..0x7f).contains(&b)) && text.bytes().any(|b| b != b' ')
}

/// Length in code points, as pydantic counts it.
fn chars_within(text: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&text.chars().count())
}

/// Within the range both encoders write alike, and not -0.0: serde_json reads the JSON
/// integer `-0` as -0.0 where orjson reads 0, so a -0.0 here may have been either.
fn plain_float(value: f64) -> bool {
    value > -FLOAT_BELOW && value < FLOAT_BELOW && !(value == 0.0 && value.is_sign_negative())
}

impl Anchor<'_> {
    fn valid(&self) -> bool {
        chars_within(&self.anchor_id, 1, IDENTIFIER_MAX_CHARS)
            && printable(&self.anchor_id)
            && self.position >= 0
            && [
                self.l2_norm,
                self.cosine_angle,
                self.kl_divergence,
                self.drift_score,
            ]
            .into_iter()
            .all(plain_float)
            && self.l2_norm >= 0.0
            && (-1.0..=1.0).contains(&self.cosine_angle)
            && self.kl_divergence >= 0.0
            && (0.0..=1.0).contains(&self.drift_score)
            && chars_within(&self.recommendation, 1, RECOMMENDATION_MAX_CHARS)
    }
}

/// An accepted event: its id, its doc type (the key), the encoded record and its summary
/// (when asked for).
pub(crate) type EventRecord = (String, String, Vec<u8>, Option<Vec<u8>>);

/// The event's field values, before the event-level checks.
pub(crate) struct Event<'e, 'a> {
    pub(crate) event_id: &'e str,
    pub(crate) event_time_ms: i64,
    pub(crate) doc_type: &'e str,
    pub(crate) snapshot_status: &'e str,
    pub(crate) anchor_count: i64,
    pub(crate) anchors: &'e [Anchor<'a>],
    pub(crate) source: Option<&'e str>,
    /// The model version (`model`); None: absent.
    pub(crate) model: Option<&'e str>,
    /// The request's latency in milliseconds (`latency_ms`); None: unknown.
    pub(crate) latency_ms: Option<i64>,
}

impl Event<'_, '_> {
    /// Bytes of the event's own strings (id, doc type, source, model): what both of its
    /// encodings take for them, before escaping.
    pub(crate) fn text_len(&self) -> usize {
        self.event_id.len()
            + self.doc_type.len()
            + self.source.map_or(0, str::len)
            + self.model.map_or(0, str::len)
    }

    /// Whether the contract (without a doubt) accepts the event, and its time lies within
    /// `window` (earliest, latest; inclusive: `validation.TimeWindow`).
    pub(crate) fn valid(&self, window: (i64, i64)) -> bool {
        chars_within(self.event_id, 1, IDENTIFIER_MAX_CHARS)
            && printable(self.event_id)
            && (EPOCH_MS_GE..EPOCH_MS_LT).contains(&self.event_time_ms)
            && (window.0..=window.1).contains(&self.event_time_ms)
            && chars_within(self.doc_type, 1, DOC_TYPE_MAX_CHARS)
            && plain_doc_type(self.doc_type)
            && SNAPSHOT_STATUSES.contains(&self.snapshot_status)
            && (0..=ANCHOR_COUNT_LE).contains(&self.anchor_count)
            && self.anchors.len() <= ANCHORS_MAX
            && self.source.is_none_or(|s| chars_within(s, 0, SOURCE_MAX_CHARS))
            // ModelVersion: model_version_text, as for a doc type (plain ASCII only here).
            && self.model.is_none_or(|m| {
                chars_within(m, 1, MODEL_VERSION_MAX_CHARS) && plain_doc_type(m)
            })
            && self
                .latency_ms
                .is_none_or(|ms| (0..=LATENCY_MAX_MS).contains(&ms))
            // SnapshotEvent._anchors_fit_count.
            && self.anchors.len() as i64 <= self.anchor_count
            && (self.snapshot_status != "disabled" || self.anchors.is_empty())
            && self.anchors.iter().all(Anchor::valid)
    }
}
