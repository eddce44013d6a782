//! A Kong http-log body: reading its entries (the configured snapshot headers in the
//! configured locations, `started_at`, `latencies.request`, and where the model version
//! comes from: a request header, `request.body`'s `model`, or the route's or service's
//! name; the rest is skipped,
//! though read as strictly as orjson reads it), and mapping each entry to its snapshot event
//! as `kong.kong_record` does.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::latency::{Latencies, Latency};
use super::model::{Found, Holder};
use super::read::{Text, Unused};
use super::snapshot::{Anchor, Event, EventRecord};

/// A snapshot header's value as Kong logs it: a string, or a list when the header repeated.
#[derive(Clone)]
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

/// The snapshot headers, by their position in `Config::names`; the model header is read
/// only with `ModelFrom::Header`.
const DOC_TYPE: usize = 0;
const STATUS: usize = 1;
const COUNT: usize = 2;
const LOG: usize = 3;
const REQUEST_ID: usize = 4;
const MODEL: usize = 5;
const SLOTS: usize = 6;

/// One location's (`request.headers`, ...) snapshot headers.
struct Headers<'a> {
    values: [Header<'a>; SLOTS],
    /// A name matched by two keys (case aside): which one Python's lookup picks depends on
    /// dict details not worth mirroring.
    ambiguous: bool,
}

/// What of one Kong log entry the mapping reads; the rest is skipped unread.
struct Entry<'a> {
    /// Per configured location, its headers when it has a `headers` object.
    locations: Vec<Option<Headers<'a>>>,
    started_at: Option<i64>,
    /// The model version from `request.body` or the route's or service's name.
    model: Found<'a>,
    /// `latencies.request`.
    latency: Latency,
    /// Something the fast path does not decide on (a repeated key, a float `started_at`).
    doubtful: bool,
}

/// Where a Kong entry's model version comes from (`kong.KongFormat.model_from`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModelFrom {
    /// `model` of the request body Kong logged as `request.body` (a JSON object, or the
    /// JSON text of one).
    RequestBody,
    /// The request header named `names[MODEL]`.
    Header,
    /// `route.name`.
    Route,
    /// `service.name`.
    Service,
}

/// The service's header configuration: the snapshot headers' names and where each is trusted.
pub(crate) struct Config {
    pub(crate) names: [String; SLOTS],
    /// Every location an entry's headers are read from: `request`, `response`.
    pub(crate) locations: Vec<String>,
    /// Per header, the locations (indexes into `locations`) it is trusted in, in order.
    pub(crate) trusted: [Vec<usize>; SLOTS],
    pub(crate) model_from: ModelFrom,
    /// What precedes each summary: the marker and the schema's fingerprint (`summary`).
    pub(crate) summary_header: Vec<u8>,
}

impl Config {
    /// How many of `names` a headers object is searched for.
    fn header_slots(&self) -> usize {
        if self.model_from == ModelFrom::Header {
            SLOTS
        } else {
            MODEL
        }
    }

    /// The top-level key of an entry whose `name` is the model version.
    fn model_key(&self) -> Option<&'static str> {
        match self.model_from {
            ModelFrom::Route => Some("route"),
            ModelFrom::Service => Some("service"),
            _ => None,
        }
    }
}

struct EntrySeed<'c>(&'c Config);
/// A location (`request`, ...): its headers, when it has a `headers` object, and with
/// `body` its `body`'s model version.
struct SectionReader<'c> {
    config: &'c Config,
    body: bool,
}

/// What a location holds for the mapping.
struct Section<'a> {
    headers: Option<Headers<'a>>,
    model: Found<'a>,
}
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
            model: Found::Absent,
            latency: Latency::Absent,
            doubtful: false,
        };
        let mut seen = vec![false; config.locations.len()];
        let (mut started_seen, mut model_seen, mut latencies_seen) = (false, false, false);
        let model_key = config.model_key();
        while let Some(Text(key)) = map.next_key()? {
            if let Some(i) = config.locations.iter().position(|l| *l == key) {
                entry.doubtful |= seen[i];
                seen[i] = true;
                let body = config.model_from == ModelFrom::RequestBody && key == "request";
                let reader = SectionReader { config, body };
                match map.next_value_seed(ObjectOrNull(reader))? {
                    Some(section) => {
                        entry.locations[i] = section.headers;
                        if body {
                            entry.model = section.model;
                        }
                    }
                    None => {
                        entry.locations[i] = None;
                        if body {
                            entry.model = Found::Absent;
                        }
                    }
                }
            } else if model_key == Some(&*key) {
                entry.doubtful |= model_seen;
                model_seen = true;
                let holder = Holder {
                    key: "name",
                    text: false,
                };
                entry.model = map.next_value_seed(holder)?;
            } else if key == "latencies" {
                entry.doubtful |= latencies_seen;
                latencies_seen = true;
                entry.latency = map.next_value_seed(Latencies)?;
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
    type Value = Section<'de>;
    fn read<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut headers: Option<Headers<'de>> = None;
        let (mut seen, mut repeated) = (false, false);
        let (mut model, mut body_seen) = (Found::Absent, false);
        while let Some(Text(key)) = map.next_key()? {
            if key == "headers" {
                repeated |= seen;
                seen = true;
                headers = map.next_value_seed(ObjectOrNull(HeadersReader(self.config)))?;
            } else if self.body && key == "body" {
                // Which of two bodies Python keeps is the reference path's to say.
                repeated |= body_seen;
                body_seen = true;
                model = map.next_value_seed(Holder {
                    key: "model",
                    text: true,
                })?;
            } else {
                map.next_value::<Unused>()?;
            }
        }
        if repeated {
            // Which of the two Python keeps is the reference path's to say.
            let headers = Some(Headers {
                values: absent(),
                ambiguous: true,
            });
            return Ok(Section { headers, model });
        }
        Ok(Section { headers, model })
    }
}

fn absent<'a>() -> [Header<'a>; SLOTS] {
    std::array::from_fn(|_| Header::Absent)
}

impl<'de> ObjectReader<'de> for HeadersReader<'_> {
    type Value = Headers<'de>;
    fn read<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let names = &self.0.names[..self.0.header_slots()];
        let mut headers = Headers {
            values: absent(),
            ambiguous: false,
        };
        let mut seen = [false; SLOTS];
        while let Some(Text(key)) = map.next_key()? {
            // HTTP header names are case-insensitive; the configured names are lower case.
            // One name may be configured twice (the model's header and a snapshot header).
            let mut hit = [false; SLOTS];
            if key.is_ascii() {
                for (i, n) in names.iter().enumerate() {
                    hit[i] = n.eq_ignore_ascii_case(&key);
                }
            } else {
                // Python's str.lower() maps a few non-ASCII letters to ASCII (KELVIN SIGN).
                let lowered = key.to_lowercase();
                for (i, n) in names.iter().enumerate() {
                    hit[i] = *n == lowered;
                }
            }
            if !hit.contains(&true) {
                map.next_value::<Unused>()?;
                continue;
            }
            let value = map.next_value::<Header<'de>>()?;
            for i in (0..SLOTS).filter(|&i| hit[i]) {
                headers.ambiguous |= seen[i];
                seen[i] = true;
                headers.values[i] = value.clone();
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
    summaries: bool,
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
    let model = match (config.model_from, &entry.model) {
        (ModelFrom::Header, _) => scalar(find(entry, config, MODEL))?,
        (_, Found::Absent) => None,
        (_, Found::Text(text)) => Some(&**text),
        (_, Found::Doubtful) => return None,
    };
    let latency_ms = match entry.latency {
        Latency::Absent => None,
        Latency::Ms(ms) => Some(ms),
        Latency::Doubtful => return None,
    };
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
        model,
        latency_ms,
    }
    .encode(
        compensated_sum,
        window,
        summaries.then_some(&config.summary_header[..]),
    )?;
    Some((event_id.to_owned(), doc_type.to_owned(), value.0, value.1))
}

/// Per entry of a Kong body, its event (with its summary when `summaries`) or None; None
/// for a body not read here.
pub(crate) fn kong_events(
    config: &Config,
    body: &[u8],
    source: &str,
    window: (i64, i64),
    compensated_sum: bool,
    summaries: bool,
) -> Option<Vec<Option<EventRecord>>> {
    // The reference refuses invalid UTF-8 anywhere, including in what this skips.
    let text = std::str::from_utf8(body).ok()?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let entries = deserializer.deserialize_any(BodySeed(config)).ok()?;
    deserializer.end().ok()?;
    let events = entries.iter();
    Some(
        events
            .map(|entry| kong_event(entry, config, source, window, compensated_sum, summaries))
            .collect(),
    )
}
