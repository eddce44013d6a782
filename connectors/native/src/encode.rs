//! Writing an accepted event as `contracts.encode` writes it, byte for byte: the fields in
//! model order, then the computed ones (mean and max drift, max KL divergence, re-sample
//! count) as Python computes them.

use serde_json::ser::{CompactFormatter, Formatter};

use super::snapshot::{Event, RESAMPLE};

impl Event<'_, '_> {
    /// The encoded event, or None where the contract (or a doubt) refuses it, or its time
    /// lies outside `window` (earliest, latest; inclusive: `validation.TimeWindow`).
    pub(crate) fn encode(&self, compensated_sum: bool, window: (i64, i64)) -> Option<Vec<u8>> {
        if !self.valid(window) {
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
        // `source` and `model` left out when None, then the computed fields.
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
        if let Some(model) = self.model {
            out.raw(b",\"model\":");
            out.string(model);
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
/// orjson's below 1e16, see `snapshot::FLOAT_BELOW`), strings escaped as both escape them.
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
