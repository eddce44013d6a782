//! An NDJSON line: the `SnapshotEvent` object it holds, as written (the contract's own
//! field names), read into the values the contract checks.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::read::{once, required, Text, Unused};
use super::snapshot::Anchor;

/// A snapshot event as an NDJSON line holds it; `source`, `model` and `latency_ms` may be
/// left out.
pub(crate) struct Snapshot<'a> {
    pub(crate) event_id: Cow<'a, str>,
    pub(crate) event_time_ms: i64,
    pub(crate) doc_type: Cow<'a, str>,
    pub(crate) snapshot_status: Cow<'a, str>,
    pub(crate) anchor_count: i64,
    pub(crate) anchors: Vec<Anchor<'a>>,
    pub(crate) source: Option<Cow<'a, str>>,
    pub(crate) model: Option<Cow<'a, str>>,
    pub(crate) latency_ms: Option<i64>,
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
                let (mut anchors, mut source, mut model, mut latency) = (None, None, None, None);
                while let Some(Text(key)) = map.next_key()? {
                    match &*key {
                        "event_id" => once(&mut id, map.next_value::<Text>()?.0)?,
                        "event_time_ms" => once(&mut time, map.next_value::<i64>()?)?,
                        "doc_type" => once(&mut doc_type, map.next_value::<Text>()?.0)?,
                        "snapshot_status" => once(&mut status, map.next_value::<Text>()?.0)?,
                        "anchor_count" => once(&mut count, map.next_value::<i64>()?)?,
                        "anchors" => once(&mut anchors, map.next_value::<Vec<Anchor>>()?)?,
                        "source" => once(&mut source, map.next_value::<Option<Text>>()?)?,
                        "model" => once(&mut model, map.next_value::<Option<Text>>()?)?,
                        // An integer only: 5.0, -0 or true are the reference path's to refuse.
                        "latency_ms" => once(&mut latency, map.next_value::<Option<i64>>()?)?,
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
                    model: model.flatten().map(|t| t.0),
                    latency_ms: latency.flatten(),
                })
            }
        }
        deserializer.deserialize_map(SnapshotVisitor)
    }
}
