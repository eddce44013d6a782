//! The ingest service's per-event path, compiled: a Kong http-log body (or one NDJSON line)
//! in, validated snapshot events out, encoded byte for byte as `contracts.encode` writes
//! them. Python calls it once per request (`records.kong_body`) or line (`ndjson_body`).
//!
//! It only ever decides what is accepted. An entry or line it does not accept, for whatever
//! reason, comes back as None and takes the reference path (orjson and the pydantic
//! contract), which accepts it or says exactly why not; so does a whole body that it cannot
//! read (`kong` returns None). Hence the rule for every check below: refuse whenever the
//! reference might answer differently. tests/unit/connectors/test_fastpath.py holds both paths
//! equal on generated, malformed and hypothesis-made input.
//!
//! The contract's bounds are constants here; `contract()` describes them, and
//! `connectors/validation.py` compares that description with the pydantic model at import,
//! so a change to the model that is not made here too stops the service from starting.

use std::borrow::Cow;
use std::fmt;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::ser::{CompactFormatter, Formatter};

// anchorwatch.contracts.models: EpochMillis, Identifier, DocType, SnapshotEvent, AnchorSnapshot.
const EPOCH_MS_GE: i64 = 946_684_800_000;
const EPOCH_MS_LT: i64 = 4_102_444_800_000;
const IDENTIFIER_MAX_CHARS: usize = 200;
const DOC_TYPE_MAX_CHARS: usize = 512;
const RECOMMENDATION_MAX_CHARS: usize = 64;
const SOURCE_MAX_CHARS: usize = 200;
const ANCHOR_COUNT_LE: i64 = 100_000;
const ANCHORS_MAX: usize = 10_000;
const SNAPSHOT_STATUSES: [&str; 2] = ["active", "disabled"];
const RESAMPLE: &str = "re-sample";
// serde_json writes floats from 1e16 up as `1e16`, where orjson writes `1e+16`; below,
// both write the same shortest text. Larger values take the reference path.
const FLOAT_BELOW: f64 = 1e16;

/// The bounds above, in the shape `validation.describe` gives the pydantic model, and the
/// recommendation counted as a re-sample.
#[pyfunction]
fn contract() -> String {
    let text = |min: usize, max: usize, printable: bool| {
        serde_json::json!({"required": true, "type": "str", "min_length": min,
                           "max_length": max, "printable": printable})
    };
    let number = |kind: &str| serde_json::json!({"required": true, "type": kind});
    let bounded = |kind: &str, bounds: serde_json::Value| {
        let mut field = number(kind);
        field
            .as_object_mut()
            .unwrap()
            .extend(bounds.as_object().unwrap().clone());
        field
    };
    serde_json::json!({
        "AnchorSnapshot": {
            "anchor_id": text(1, IDENTIFIER_MAX_CHARS, true),
            "position": bounded("int", serde_json::json!({"ge": 0})),
            "l2_norm": bounded("float", serde_json::json!({"ge": 0.0})),
            "cosine_angle": bounded("float", serde_json::json!({"ge": -1.0, "le": 1.0})),
            "kl_divergence": bounded("float", serde_json::json!({"ge": 0.0})),
            "drift_score": bounded("float", serde_json::json!({"ge": 0.0, "le": 1.0})),
            "recommendation": text(1, RECOMMENDATION_MAX_CHARS, false),
        },
        "SnapshotEvent": {
            "event_id": text(1, IDENTIFIER_MAX_CHARS, true),
            "event_time_ms": bounded("int", serde_json::json!({"ge": EPOCH_MS_GE, "lt": EPOCH_MS_LT})),
            "doc_type": {"required": true, "type": "str", "min_length": 1,
                         "max_length": DOC_TYPE_MAX_CHARS, "printable": false,
                         "rule": "doc_type_text"},
            "snapshot_status": {"required": true, "type": "literal", "values": SNAPSHOT_STATUSES},
            "anchor_count": bounded("int", serde_json::json!({"ge": 0, "le": ANCHOR_COUNT_LE})),
            "anchors": {"required": false, "default": [], "type": "list",
                        "items": "AnchorSnapshot", "max_length": ANCHORS_MAX},
            "source": {"required": false, "default": null, "optional": true, "type": "str",
                       "max_length": SOURCE_MAX_CHARS, "printable": false},
        },
        "RESAMPLE": RESAMPLE,
    })
    .to_string()
}

// ------------------------------------------------------------------------------ the contract

struct Anchor<'a> {
    anchor_id: Cow<'a, str>,
    position: i64,
    l2_norm: f64,
    cosine_angle: f64,
    kl_divergence: f64,
    drift_score: f64,
    recommendation: Cow<'a, str>,
}

// ------------------------------------------------------------------------------ reading JSON
//
// serde's derived readers skip unknown keys with `IgnoredAny`, for which serde_json checks
// only the syntax; orjson also refuses numbers beyond the float range and lone surrogate
// escapes there. So every reader here is written out, and skips with `Unused`, which reads
// such values in full.

/// A value the fast path does not use, read as strictly as orjson reads it.
struct Unused;

impl<'de> Deserialize<'de> for Unused {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UnusedVisitor;
        impl<'de> Visitor<'de> for UnusedVisitor {
            type Value = Unused;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Unused, E> {
                Ok(Unused)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unused, A::Error> {
                while seq.next_element::<Unused>()?.is_some() {}
                Ok(Unused)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unused, A::Error> {
                while map.next_entry::<Unused, Unused>()?.is_some() {}
                Ok(Unused)
            }
        }
        deserializer.deserialize_any(UnusedVisitor)
    }
}

/// Fill a field once; a repeated key is for the reference path (Python keeps the last).
fn once<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.replace(value).is_some() {
        return Err(E::custom("repeated key"));
    }
    Ok(())
}

fn required<T, E: de::Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(name))
}

impl<'de> Deserialize<'de> for Anchor<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AnchorVisitor;
        impl<'de> Visitor<'de> for AnchorVisitor {
            type Value = Anchor<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an anchor object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut id, mut position, mut l2, mut cosine, mut kl, mut drift, mut rec) =
                    (None, None, None, None, None, None, None);
                while let Some(Text(key)) = map.next_key()? {
                    match &*key {
                        "anchor_id" => once(&mut id, map.next_value::<Text>()?.0)?,
                        "position" => once(&mut position, map.next_value::<i64>()?)?,
                        "l2_norm" => once(&mut l2, map.next_value::<f64>()?)?,
                        "cosine_angle" => once(&mut cosine, map.next_value::<f64>()?)?,
                        "kl_divergence" => once(&mut kl, map.next_value::<f64>()?)?,
                        "drift_score" => once(&mut drift, map.next_value::<f64>()?)?,
                        "recommendation" => once(&mut rec, map.next_value::<Text>()?.0)?,
                        _ => {
                            map.next_value::<Unused>()?;
                        }
                    }
                }
                Ok(Anchor {
                    anchor_id: required(id, "anchor_id")?,
                    position: required(position, "position")?,
                    l2_norm: required(l2, "l2_norm")?,
                    cosine_angle: required(cosine, "cosine_angle")?,
                    kl_divergence: required(kl, "kl_divergence")?,
                    drift_score: required(drift, "drift_score")?,
                    recommendation: required(rec, "recommendation")?,
                })
            }
        }
        deserializer.deserialize_map(AnchorVisitor)
    }
}

/// A JSON string the contract's `Identifier`/`DocType` pattern accepts: no control characters.
fn printable(text: &str) -> bool {
    !text.bytes().any(|b| b < 0x20 || b == 0x7f)
}

/// A doc type the contract's `doc_type_text` surely takes unchanged: printable ASCII (in
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

/// An accepted event: its id, its doc type (the key) and the encoded record.
type EventRecord = (String, String, Vec<u8>);

/// The event's field values, before the event-level checks.
struct Event<'e, 'a> {
    event_id: &'e str,
    event_time_ms: i64,
    doc_type: &'e str,
    snapshot_status: &'e str,
    anchor_count: i64,
    anchors: &'e [Anchor<'a>],
    source: Option<&'e str>,
}

impl Event<'_, '_> {
    /// The encoded event, or None where the contract (or a doubt) refuses it, or its time
    /// lies outside `window` (earliest, latest; inclusive: `validation.TimeWindow`).
    fn encode(&self, compensated_sum: bool, window: (i64, i64)) -> Option<Vec<u8>> {
        let valid = chars_within(self.event_id, 1, IDENTIFIER_MAX_CHARS)
            && printable(self.event_id)
            && (EPOCH_MS_GE..EPOCH_MS_LT).contains(&self.event_time_ms)
            && (window.0..=window.1).contains(&self.event_time_ms)
            && chars_within(self.doc_type, 1, DOC_TYPE_MAX_CHARS)
            && plain_doc_type(self.doc_type)
            && SNAPSHOT_STATUSES.contains(&self.snapshot_status)
            && (0..=ANCHOR_COUNT_LE).contains(&self.anchor_count)
            && self.anchors.len() <= ANCHORS_MAX
            && self.source.is_none_or(|s| chars_within(s, 0, SOURCE_MAX_CHARS))
            // SnapshotEvent._anchors_fit_count.
            && self.anchors.len() as i64 <= self.anchor_count
            && (self.snapshot_status != "disabled" || self.anchors.is_empty())
            && self.anchors.iter().all(Anchor::valid);
        if !valid {
            return None;
        }
        let drifts = self.anchors.iter().map(|a| a.drift_score);
        let (mean_drift, max_drift, max_kl_divergence) = if self.anchors.is_empty() {
            (0.0, 0.0, 0.0)
        } else {
            (
                python_sum(drifts.clone(), compensated_sum) / self.anchors.len() as f64,
                python_max(drifts),
                python_max(self.anchors.iter().map(|a| a.kl_divergence)),
            )
        };
        // What contracts.encode(SnapshotEvent(...)) writes: the fields in model order,
        // `source` left out when None, then the computed fields.
        let mut out = Json(Vec::with_capacity(256 + 192 * self.anchors.len()));
        out.raw(b"{\"event_id\":");
        out.string(self.event_id);
        out.raw(b",\"event_time_ms\":");
        out.int(self.event_time_ms);
        out.raw(b",\"doc_type\":");
        out.string(self.doc_type);
        out.raw(b",\"snapshot_status\":");
        out.string(self.snapshot_status);
        out.raw(b",\"anchor_count\":");
        out.int(self.anchor_count);
        out.raw(b",\"anchors\":[");
        for (i, anchor) in self.anchors.iter().enumerate() {
            if i > 0 {
                out.raw(b",");
            }
            out.raw(b"{\"anchor_id\":");
            out.string(&anchor.anchor_id);
            out.raw(b",\"position\":");
            out.int(anchor.position);
            out.raw(b",\"l2_norm\":");
            out.float(anchor.l2_norm);
            out.raw(b",\"cosine_angle\":");
            out.float(anchor.cosine_angle);
            out.raw(b",\"kl_divergence\":");
            out.float(anchor.kl_divergence);
            out.raw(b",\"drift_score\":");
            out.float(anchor.drift_score);
            out.raw(b",\"recommendation\":");
            out.string(&anchor.recommendation);
            out.raw(b"}");
        }
        out.raw(b"]");
        if let Some(source) = self.source {
            out.raw(b",\"source\":");
            out.string(source);
        }
        out.raw(b",\"mean_drift\":");
        out.float(mean_drift);
        out.raw(b",\"max_drift\":");
        out.float(max_drift);
        out.raw(b",\"max_kl_divergence\":");
        out.float(max_kl_divergence);
        out.raw(b",\"resample_count\":");
        let resamples = self.anchors.iter().filter(|a| a.recommendation == RESAMPLE);
        out.int(resamples.count() as i64);
        out.raw(b"}");
        Some(out.0)
    }
}

/// Compact JSON as orjson writes it: numbers in serde_json's shortest form (equal to
/// orjson's below 1e16, see FLOAT_BELOW), strings escaped as both escape them.
struct Json(Vec<u8>);

impl Json {
    fn raw(&mut self, text: &[u8]) {
        self.0.extend_from_slice(text);
    }

    fn int(&mut self, value: i64) {
        // Writing to a Vec cannot fail.
        let _ = CompactFormatter.write_i64(&mut self.0, value);
    }

    fn float(&mut self, value: f64) {
        let _ = CompactFormatter.write_f64(&mut self.0, value);
    }

    /// `"`, `\` and the control characters escaped (\b \f \n \r \t, else \u00xx); the
    /// rest, DEL and non-ASCII included, as is.
    fn string(&mut self, text: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let (out, bytes) = (&mut self.0, text.as_bytes());
        out.push(b'"');
        let mut start = 0;
        for (i, &byte) in bytes.iter().enumerate() {
            let short: &[u8] = match byte {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                0x08 => b"\\b",
                0x0c => b"\\f",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x00..=0x1f => b"",
                _ => continue,
            };
            out.extend_from_slice(&bytes[start..i]);
            if short.is_empty() {
                out.extend_from_slice(b"\\u00");
                out.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
            } else {
                out.extend_from_slice(short);
            }
            start = i + 1;
        }
        out.extend_from_slice(&bytes[start..]);
        out.push(b'"');
    }
}

/// Python's `sum()` of floats, bit for bit: plain addition up to 3.11, Neumaier's
/// compensated summation from 3.12 on.
fn python_sum(values: impl Iterator<Item = f64>, compensated: bool) -> f64 {
    let (mut total, mut compensation) = (0.0_f64, 0.0_f64);
    for x in values {
        let t = total + x;
        if compensated {
            compensation += if total.abs() >= x.abs() {
                (total - t) + x
            } else {
                (x - t) + total
            };
        }
        total = t;
    }
    if compensation != 0.0 && compensation.is_finite() {
        total += compensation;
    }
    total
}

/// Python's `max()`: the first of equal values wins (so 0.0 and -0.0 keep their order).
fn python_max(mut values: impl Iterator<Item = f64>) -> f64 {
    let mut best = values.next().unwrap_or(0.0);
    for x in values {
        if x > best {
            best = x;
        }
    }
    best
}

// ------------------------------------------------------------------------------ Kong entries

/// A snapshot header's value as Kong logs it: a string, or a list when the header repeated.
enum Header<'a> {
    Absent,
    One(Cow<'a, str>),
    Repeated(Vec<Cow<'a, str>>),
}

impl<'de> Deserialize<'de> for Header<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeaderVisitor;
        impl<'de> Visitor<'de> for HeaderVisitor {
            type Value = Header<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a list of strings, or null")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Header::One(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Header::One(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Header::One(Cow::Owned(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Header::Absent)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut parts = Vec::new();
                while let Some(Text(part)) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Header::Repeated(parts))
            }
        }
        // Anything else (a number, an object, a list holding one) is an error: the whole
        // body then takes the reference path, which names the problem.
        deserializer.deserialize_any(HeaderVisitor)
    }
}

/// A JSON string, borrowed from the body when it holds no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// The five snapshot headers, by their position in `Names`.
const DOC_TYPE: usize = 0;
const STATUS: usize = 1;
const COUNT: usize = 2;
const LOG: usize = 3;
const REQUEST_ID: usize = 4;

/// One location's (`request.headers`, ...) snapshot headers.
struct Headers<'a> {
    values: [Header<'a>; 5],
    /// A name matched by two keys (case aside): which one Python's lookup picks depends on
    /// dict details not worth mirroring.
    ambiguous: bool,
}

/// What of one Kong log entry the mapping reads; the rest is skipped unread.
struct Entry<'a> {
    /// Per configured location, its headers when it has a `headers` object.
    locations: Vec<Option<Headers<'a>>>,
    started_at: Option<i64>,
    /// Something the fast path does not decide on (a repeated key, a float `started_at`).
    doubtful: bool,
}

struct Config {
    names: [String; 5],
    /// Every location an entry's headers are read from: `request`, `response`.
    locations: Vec<String>,
    /// Per header, the locations (indexes into `locations`) it is trusted in, in order.
    trusted: [Vec<usize>; 5],
}

struct EntrySeed<'c>(&'c Config);
/// A location (`request`, ...): its headers, when it has a `headers` object.
struct SectionReader<'c>(&'c Config);
/// A `headers` object: the snapshot headers in it.
struct HeadersReader<'c>(&'c Config);

/// Reads a JSON object's entries.
trait ObjectReader<'de> {
    type Value;
    fn read<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error>;
}

/// A JSON object, read by `R`, or null (None); anything else is an error (the whole body
/// then takes the reference path, which names the problem).
struct ObjectOrNull<R>(R);

impl<'de, R: ObjectReader<'de>> DeserializeSeed<'de> for ObjectOrNull<R> {
    type Value = Option<R::Value>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de, R: ObjectReader<'de>> Visitor<'de> for ObjectOrNull<R> {
    type Value = Option<R::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.read(map).map(Some)
    }
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = Entry<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = Entry<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kong log entry (a JSON object)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let config = self.0;
        let mut entry = Entry {
            locations: config.locations.iter().map(|_| None).collect(),
            started_at: None,
            doubtful: false,
        };
        let mut seen = vec![false; config.locations.len()];
        let mut started_seen = false;
        while let Some(Text(key)) = map.next_key()? {
            if let Some(i) = config.locations.iter().position(|l| *l == key) {
                entry.doubtful |= seen[i];
                seen[i] = true;
                entry.locations[i] = map
                    .next_value_seed(ObjectOrNull(SectionReader(config)))?
                    .flatten();
            } else if key == "started_at" {
                entry.doubtful |= started_seen;
                started_seen = true;
                match map.next_value::<Option<serde_json::Number>>()? {
                    Some(n) => match n.as_i64() {
                        Some(ms) => entry.started_at = Some(ms),
                        None => entry.doubtful = true,
                    },
                    None => entry.started_at = None,
                }
            } else {
                map.next_value::<Unused>()?;
            }
        }
        Ok(entry)
    }
}

impl<'de> ObjectReader<'de> for SectionReader<'_> {
    type Value = Option<Headers<'de>>;
    fn read<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut headers: Option<Headers<'de>> = None;
        let (mut seen, mut repeated) = (false, false);
        while let Some(Text(key)) = map.next_key()? {
            if key == "headers" {
                repeated |= seen;
                seen = true;
                headers = map.next_value_seed(ObjectOrNull(HeadersReader(self.0)))?;
            } else {
                map.next_value::<Unused>()?;
            }
        }
        if repeated {
            // Which of the two Python keeps is the reference path's to say.
            return Ok(Some(Headers {
                values: absent(),
                ambiguous: true,
            }));
        }
        Ok(headers)
    }
}

fn absent<'a>() -> [Header<'a>; 5] {
    [
        Header::Absent,
        Header::Absent,
        Header::Absent,
        Header::Absent,
        Header::Absent,
    ]
}

impl<'de> ObjectReader<'de> for HeadersReader<'_> {
    type Value = Headers<'de>;
    fn read<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let names = &self.0.names;
        let mut headers = Headers {
            values: absent(),
            ambiguous: false,
        };
        let mut seen = [false; 5];
        while let Some(Text(key)) = map.next_key()? {
            // HTTP header names are case-insensitive; the configured names are lower case.
            let slot = if key.is_ascii() {
                names.iter().position(|n| n.eq_ignore_ascii_case(&key))
            } else {
                // Python's str.lower() maps a few non-ASCII letters to ASCII (KELVIN SIGN).
                let lowered = key.to_lowercase();
                names.iter().position(|n| *n == lowered)
            };
            match slot {
                Some(i) => {
                    headers.ambiguous |= seen[i];
                    seen[i] = true;
                    headers.values[i] = map.next_value::<Header<'de>>()?;
                }
                None => {
                    map.next_value::<Unused>()?;
                }
            }
        }
        Ok(headers)
    }
}

/// A body of entries: one entry, or an array of them.
struct BodySeed<'c>(&'c Config);

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = Vec<Entry<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kong log entry or an array of them")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(100));
        while let Some(entry) = seq.next_element_seed(EntrySeed(self.0))? {
            entries.push(entry);
        }
        Ok(entries)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Ok(vec![EntrySeed(self.0).visit_map(map)?])
    }
}

/// Python's `str.strip()` where the fast path can be sure of it: the ASCII characters
/// Python calls whitespace. A non-ASCII whitespace character at either end: None.
fn python_strip(text: &str) -> Option<&str> {
    let stripped = text.trim_matches(|c: char| {
        matches!(
            c,
            '\t' | '\n' | '\x0b' | '\x0c' | '\r' | '\x1c'..='\x1f' | ' '
        )
    });
    let unsure = |c: Option<char>| c.is_some_and(|c| !c.is_ascii() && c.is_whitespace());
    if unsure(stripped.chars().next()) || unsure(stripped.chars().next_back()) {
        return None;
    }
    Some(stripped)
}

/// `kong._Headers.scalar`: the stripped value; a repeated header must repeat one value.
/// Outer None: refused here.
fn scalar<'h>(header: &'h Header) -> Option<Option<&'h str>> {
    match header {
        Header::Absent => Some(None),
        Header::One(value) => python_strip(value).map(Some),
        Header::Repeated(values) => {
            let first = python_strip(values.first()?)?;
            for other in &values[1..] {
                if python_strip(other)? != first {
                    return None;
                }
            }
            Some(Some(first))
        }
    }
}

/// `kong._count`: ASCII digits only.
fn anchor_count(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = text.trim_start_matches('0');
    if digits.len() > 6 {
        return Some(i64::MAX); // beyond the contract's bound either way
    }
    Some(digits.parse().unwrap_or(0))
}

/// The anchors of one part of the snapshot log: a JSON array of anchor objects, or one.
fn anchor_log<'p>(part: &'p str, into: &mut Vec<Anchor<'p>>) -> Option<()> {
    let text = part.trim_start_matches([' ', '\t', '\n', '\r']);
    if text.starts_with('[') {
        into.extend(serde_json::from_str::<Vec<Anchor<'p>>>(part).ok()?);
    } else if text.starts_with('{') {
        into.push(serde_json::from_str::<Anchor<'p>>(part).ok()?);
    } else {
        return None;
    }
    Some(())
}

/// The header in a location, Absent when the location has no headers object.
fn at<'e, 'a>(entry: &'e Entry<'a>, location: usize, slot: usize) -> &'e Header<'a> {
    match &entry.locations[location] {
        Some(headers) => &headers.values[slot],
        None => &Header::Absent,
    }
}

/// The first trusted location holding the header (`kong._Headers.find`).
fn find<'e, 'a>(entry: &'e Entry<'a>, config: &Config, slot: usize) -> &'e Header<'a> {
    config.trusted[slot]
        .iter()
        .map(|&location| at(entry, location, slot))
        .find(|h| !matches!(h, Header::Absent))
        .unwrap_or(&Header::Absent)
}

/// `kong.kong_record` for an entry the fast path can decide on: the event, or None.
fn kong_event(
    entry: &Entry,
    config: &Config,
    source: &str,
    window: (i64, i64),
    compensated_sum: bool,
) -> Option<EventRecord> {
    if entry.doubtful || entry.locations.iter().flatten().any(|h| h.ambiguous) {
        return None;
    }
    // A snapshot header where it is not trusted (a client's forgery, most likely) is
    // ignored and counted: the reference path does the counting.
    for slot in [DOC_TYPE, STATUS, COUNT, LOG] {
        for location in 0..config.locations.len() {
            if !config.trusted[slot].contains(&location)
                && !matches!(at(entry, location, slot), Header::Absent)
            {
                return None;
            }
        }
    }
    let doc_type = scalar(find(entry, config, DOC_TYPE))??;
    let status = scalar(find(entry, config, STATUS))??;
    let count = anchor_count(scalar(find(entry, config, COUNT))??)?;
    // Without a usable request-id header the id comes from request.id or a hash of the
    // entry, and the fallback is counted: the reference path's to do.
    let event_id = scalar(find(entry, config, REQUEST_ID))??;
    let mut anchors = Vec::new();
    match find(entry, config, LOG) {
        Header::Absent => {
            if status == "active" && count > 0 {
                return None; // the reference rejects: the log is required here
            }
        }
        Header::One(part) => anchor_log(part, &mut anchors)?,
        Header::Repeated(parts) => {
            for part in parts {
                anchor_log(part, &mut anchors)?;
            }
        }
    }
    let value = Event {
        event_id,
        event_time_ms: entry.started_at?,
        doc_type,
        snapshot_status: status,
        anchor_count: count,
        anchors: &anchors,
        source: Some(source),
    }
    .encode(compensated_sum, window)?;
    Some((event_id.to_owned(), doc_type.to_owned(), value))
}

// ------------------------------------------------------------------------------ NDJSON lines

struct Snapshot<'a> {
    event_id: Cow<'a, str>,
    event_time_ms: i64,
    doc_type: Cow<'a, str>,
    snapshot_status: Cow<'a, str>,
    anchor_count: i64,
    anchors: Vec<Anchor<'a>>,
    source: Option<Cow<'a, str>>,
}

impl<'de> Deserialize<'de> for Snapshot<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SnapshotVisitor;
        impl<'de> Visitor<'de> for SnapshotVisitor {
            type Value = Snapshot<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a snapshot event object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut id, mut time, mut doc_type, mut status, mut count) =
                    (None, None, None, None, None);
                let (mut anchors, mut source) = (None, None);
                while let Some(Text(key)) = map.next_key()? {
                    match &*key {
                        "event_id" => once(&mut id, map.next_value::<Text>()?.0)?,
                        "event_time_ms" => once(&mut time, map.next_value::<i64>()?)?,
                        "doc_type" => once(&mut doc_type, map.next_value::<Text>()?.0)?,
                        "snapshot_status" => once(&mut status, map.next_value::<Text>()?.0)?,
                        "anchor_count" => once(&mut count, map.next_value::<i64>()?)?,
                        "anchors" => once(&mut anchors, map.next_value::<Vec<Anchor>>()?)?,
                        "source" => once(&mut source, map.next_value::<Option<Text>>()?)?,
                        _ => {
                            map.next_value::<Unused>()?;
                        }
                    }
                }
                Ok(Snapshot {
                    event_id: required(id, "event_id")?,
                    event_time_ms: required(time, "event_time_ms")?,
                    doc_type: required(doc_type, "doc_type")?,
                    snapshot_status: required(status, "snapshot_status")?,
                    anchor_count: required(count, "anchor_count")?,
                    anchors: anchors.unwrap_or_default(),
                    source: source.flatten().map(|t| t.0),
                })
            }
        }
        deserializer.deserialize_map(SnapshotVisitor)
    }
}

// ------------------------------------------------------------------------------ Python

/// Reads request bodies with the service's header configuration.
#[pyclass(frozen, module = "anchorwatch.connectors._native")]
struct SnapshotReader {
    config: Config,
    /// `validation.Accepted`, built for each accepted event.
    accepted: Py<PyAny>,
    compensated_sum: bool,
}

#[pymethods]
impl SnapshotReader {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        doc_type: String,
        snapshot_status: String,
        anchor_count: String,
        snapshot_log: String,
        request_id: String,
        doc_type_locations: Vec<String>,
        measurement_locations: Vec<String>,
        request_id_locations: Vec<String>,
        accepted: Py<PyAny>,
    ) -> PyResult<Self> {
        let locations = vec!["request".to_owned(), "response".to_owned()];
        let indexes = |names: &[String]| -> PyResult<Vec<usize>> {
            names
                .iter()
                .map(|name| {
                    locations.iter().position(|l| l == name).ok_or_else(|| {
                        pyo3::exceptions::PyValueError::new_err(format!(
                            "unknown header location {name:?}"
                        ))
                    })
                })
                .collect()
        };
        let measurements = indexes(&measurement_locations)?;
        let trusted = [
            indexes(&doc_type_locations)?,
            measurements.clone(),
            measurements.clone(),
            measurements,
            indexes(&request_id_locations)?,
        ];
        Ok(SnapshotReader {
            config: Config {
                names: [
                    doc_type,
                    snapshot_status,
                    anchor_count,
                    snapshot_log,
                    request_id,
                ],
                locations,
                trusted,
            },
            accepted,
            compensated_sum: py.version_info() >= (3, 12),
        })
    }

    /// One Kong http-log body: per entry, its `Accepted` or None (take the reference path
    /// for it). None for the whole body when it is not one this reader can read. Events
    /// timed outside `earliest_ms..=latest_ms` are not accepted here.
    fn kong<'py>(
        &self,
        py: Python<'py>,
        body: &[u8],
        source: &str,
        earliest_ms: i64,
        latest_ms: i64,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let window = (earliest_ms, latest_ms);
        // Reading, checking and encoding touch no Python object: other threads run meanwhile.
        let Some(events) = py.detach(|| self.kong_events(body, source, window)) else {
            return Ok(None);
        };
        let accepted = self.accepted.bind(py);
        let mut out = Vec::with_capacity(events.len());
        for event in events {
            out.push(match event {
                Some((event_id, doc_type, value)) => {
                    Some(accepted.call1((event_id, doc_type, PyBytes::new(py, &value)))?)
                }
                None => None,
            });
        }
        PyList::new(py, out).map(Some)
    }

    /// One NDJSON line: its `Accepted`, or None (take the reference path). An event without
    /// a `source` gets ``source``.
    fn ndjson_line<'py>(
        &self,
        py: Python<'py>,
        line: &[u8],
        source: &str,
        earliest_ms: i64,
        latest_ms: i64,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Ok(text) = std::str::from_utf8(line) else {
            return Ok(None);
        };
        let Ok(event) = serde_json::from_str::<Snapshot>(text) else {
            return Ok(None);
        };
        let encoded = Event {
            event_id: &event.event_id,
            event_time_ms: event.event_time_ms,
            doc_type: &event.doc_type,
            snapshot_status: &event.snapshot_status,
            anchor_count: event.anchor_count,
            anchors: &event.anchors,
            source: Some(event.source.as_deref().unwrap_or(source)),
        }
        .encode(self.compensated_sum, (earliest_ms, latest_ms));
        match encoded {
            Some(value) => self
                .accepted
                .bind(py)
                .call1((&*event.event_id, &*event.doc_type, PyBytes::new(py, &value)))
                .map(Some),
            None => Ok(None),
        }
    }
}

impl SnapshotReader {
    /// Per entry of a Kong body, its event or None; None for a body not read here.
    fn kong_events(
        &self,
        body: &[u8],
        source: &str,
        window: (i64, i64),
    ) -> Option<Vec<Option<EventRecord>>> {
        // The reference refuses invalid UTF-8 anywhere, including in what this skips.
        let text = std::str::from_utf8(body).ok()?;
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let entries = deserializer.deserialize_any(BodySeed(&self.config)).ok()?;
        deserializer.end().ok()?;
        let events = entries.iter();
        Some(
            events
                .map(|entry| kong_event(entry, &self.config, source, window, self.compensated_sum))
                .collect(),
        )
    }
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<SnapshotReader>()?;
    module.add_function(wrap_pyfunction!(contract, module)?)?;
    Ok(())
}
