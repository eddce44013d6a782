//! An accepted event's summary, the summaries topic's record, written as
//! `contracts.avro.encode_summary` writes it, byte for byte: Avro's single-object encoding
//! of `SnapshotSummary` (schemas/snapshot-summary.v2.avsc), after the header Python passes
//! in (marker and fingerprint: the schema stays Python's to name). Made here, from the
//! figures just computed, it costs a fraction of a microsecond; made in Python from the
//! encoded event, several. `records.check_native_summary` compares the two at import, so
//! a schema changed in Python alone stops the service from starting.

use super::encode::Figures;
use super::snapshot::{Event, KINDS};

/// Avro's binary encoding, the parts a summary uses.
struct Avro(Vec<u8>);

impl Avro {
    /// int and long: zig-zag, then a base-128 varint, low groups first.
    fn long(&mut self, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            self.0.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
        self.0.push(z as u8);
    }

    fn double(&mut self, x: f64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }

    fn string(&mut self, text: &str) {
        self.long(text.len() as i64);
        self.0.extend_from_slice(text.as_bytes());
    }

    /// A ["null", T] union: branch 0, or branch 1 and the value.
    fn optional<T>(&mut self, value: Option<T>, write: impl FnOnce(&mut Self, T)) {
        match value {
            None => self.0.push(0),
            Some(v) => {
                self.0.push(2);
                write(self, v);
            }
        }
    }
}

impl Event<'_, '_> {
    /// The summary of this (valid) event with its `figures`.
    pub(crate) fn summary(&self, figures: &Figures, header: &[u8]) -> Vec<u8> {
        let kinds = 30 * figures.kinds.iter().flatten().count();
        let top: usize = figures
            .top_anchors
            .iter()
            .map(|&i| 24 + self.anchors[i].anchor_id.len())
            .sum();
        let capacity = header.len() + 96 + self.text_len() + kinds + top;
        let mut out = Avro(Vec::with_capacity(capacity));
        out.0.extend_from_slice(header);
        out.string(self.event_id);
        out.long(self.event_time_ms);
        out.string(self.doc_type);
        out.string(self.snapshot_status);
        out.long(self.anchor_count);
        out.optional(self.source, Avro::string);
        out.optional(self.model, Avro::string);
        out.optional(self.latency_ms, Avro::long);
        out.double(figures.mean_drift);
        out.double(figures.max_drift);
        out.double(figures.max_kl_divergence);
        out.long(figures.resample_count);
        // A map, then an array: one block (its count, the items) and the empty block that
        // ends it; nothing but the end when empty.
        let present = figures.kinds.iter().flatten().count();
        if present > 0 {
            out.long(present as i64);
            for (kind, figures) in KINDS.iter().zip(figures.kinds) {
                if let Some((count, mean, max_at)) = figures {
                    out.string(kind);
                    out.long(count as i64);
                    out.double(mean);
                    out.double(self.anchors[max_at].drift_score);
                }
            }
        }
        out.0.push(0);
        if !figures.top_anchors.is_empty() {
            out.long(figures.top_anchors.len() as i64);
            for &at in &figures.top_anchors {
                let anchor = &self.anchors[at];
                out.string(&anchor.anchor_id);
                out.long(anchor.position);
                out.double(anchor.drift_score);
            }
        }
        out.0.push(0);
        out.0
    }
}
