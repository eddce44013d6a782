//! Writing an accepted event as `contracts.encode` writes it, byte for byte: the fields in
//! model order, then the computed ones (mean and max drift, max KL divergence, re-sample
//! count, the figures per anchor kind and the top anchors) as Python computes them.

use serde_json::ser::{CompactFormatter, Formatter};

use super::snapshot::{Anchor, Event, KINDS, RESAMPLE, TOP_ANCHORS_PER_EVENT};

/// The figures `SnapshotEvent` computes from its anchors (its computed fields).
pub(crate) struct Figures {
    pub(crate) mean_drift: f64,
    pub(crate) max_drift: f64,
    pub(crate) max_kl_divergence: f64,
    pub(crate) resample_count: i64,
    /// Per kind in `KINDS` order: (anchor count, mean drift, the index of its first anchor of
    /// highest drift); None: no anchor.
    pub(crate) kinds: [Option<(usize, f64, usize)>; 8],
    /// The indexes of the top anchors, best first.
    pub(crate) top_anchors: Vec<usize>,
}

impl Figures {
    fn of(anchors: &[Anchor], compensated_sum: bool) -> Self {
        let drifts = anchors.iter().map(|a| a.drift_score);
        let (mean_drift, max_drift, max_kl_divergence) = if anchors.is_empty() {
            (0.0, 0.0, 0.0)
        } else {
            (
                python_sum(drifts.clone(), compensated_sum) / anchors.len() as f64,
                python_max(drifts),
                python_max(anchors.iter().map(|a| a.kl_divergence)),
            )
        };
        Figures {
            mean_drift,
            max_drift,
            max_kl_divergence,
            resample_count: anchors
                .iter()
                .filter(|a| a.recommendation == RESAMPLE)
                .count() as i64,
            kinds: kind_figures(anchors, compensated_sum),
            top_anchors: top_anchors(anchors),
        }
    }
}

impl Event<'_, '_> {
    /// The encoded event and, when `summary_header` is given, its summary (`summary`, after
    /// the header), or None where the contract (or a doubt) refuses it, or its time lies
    /// outside `window` (earliest, latest; inclusive: `validation.TimeWindow`).
    pub(crate) fn encode(
        &self,
        compensated_sum: bool,
        window: (i64, i64),
        summary_header: Option<&[u8]>,
    ) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        if !self.valid(window) {
            return None;
        }
        let figures = Figures::of(self.anchors, compensated_sum);
        let summary = summary_header.map(|header| self.summary(&figures, header));
        Some((self.json(&figures), summary))
    }

    /// Bytes the encoded event takes, about (a little more for most): one allocation, no
    /// growth that copies what is written so far.
    fn json_capacity(&self, figures: &Figures) -> usize {
        let anchors: usize = self
            .anchors
            .iter()
            .map(|a| 200 + a.anchor_id.len() + a.recommendation.len())
            .sum();
        let top: usize = figures
            .top_anchors
            .iter()
            .map(|&i| 64 + self.anchors[i].anchor_id.len())
            .sum();
        let kinds = 80 * figures.kinds.iter().flatten().count();
        320 + self.text_len() + anchors + kinds + top
    }

    fn json(&self, figures: &Figures) -> Vec<u8> {
        // What contracts.encode(SnapshotEvent(...)) writes: the fields in model order,
        // `source` and `model` left out when None, then the computed fields.
        let mut out = Json(Vec::with_capacity(self.json_capacity(figures)));
        // Where each anchor's id (quoted) and drift are written: a kind's max and a top
        // anchor's id and drift are copied from there rather than escaped or formatted again.
        let mut id_text = Vec::with_capacity(self.anchors.len());
        let mut drift_text = Vec::with_capacity(self.anchors.len());
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
            let from = out.0.len();
            out.string(&anchor.anchor_id);
            id_text.push(from..out.0.len());
            out.raw(b",\"position\":");
            out.int(anchor.position);
            out.raw(b",\"l2_norm\":");
            out.float(anchor.l2_norm);
            out.raw(b",\"cosine_angle\":");
            out.float(anchor.cosine_angle);
            out.raw(b",\"kl_divergence\":");
            out.float(anchor.kl_divergence);
            out.raw(b",\"drift_score\":");
            let from = out.0.len();
            out.float(anchor.drift_score);
            drift_text.push(from..out.0.len());
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
        if let Some(latency_ms) = self.latency_ms {
            out.raw(b",\"latency_ms\":");
            out.int(latency_ms);
        }
        out.raw(b",\"mean_drift\":");
        out.float(figures.mean_drift);
        out.raw(b",\"max_drift\":");
        out.float(figures.max_drift);
        out.raw(b",\"max_kl_divergence\":");
        out.float(figures.max_kl_divergence);
        out.raw(b",\"resample_count\":");
        out.int(figures.resample_count);
        out.raw(b",\"kinds\":{");
        let mut first = true;
        for (kind, figures) in KINDS.iter().zip(figures.kinds) {
            let Some((count, mean, max_at)) = figures else {
                continue;
            };
            if !std::mem::take(&mut first) {
                out.raw(b",");
            }
            // Kind names need no escaping.
            out.raw(b"\"");
            out.raw(kind.as_bytes());
            out.raw(b"\":{\"anchor_count\":");
            out.int(count as i64);
            out.raw(b",\"mean_drift\":");
            out.float(mean);
            out.raw(b",\"max_drift\":");
            out.0.extend_from_within(drift_text[max_at].clone());
            out.raw(b"}");
        }
        out.raw(b"},\"top_anchors\":[");
        for (i, &at) in figures.top_anchors.iter().enumerate() {
            if i > 0 {
                out.raw(b",");
            }
            let anchor = &self.anchors[at];
            out.raw(b"{\"anchor_id\":");
            out.0.extend_from_within(id_text[at].clone());
            out.raw(b",\"position\":");
            out.int(anchor.position);
            out.raw(b",\"drift_score\":");
            out.0.extend_from_within(drift_text[at].clone());
            out.raw(b"}");
        }
        out.raw(b"]}");
        out.0
    }
}

/// `breakdown.anchor_kind`: the index in `KINDS` of the id's text before the first `_`,
/// else OTHER's (the last).
fn kind_of(anchor_id: &str) -> usize {
    let id = anchor_id.as_bytes();
    let prefix = id
        .iter()
        .position(|&b| b == b'_')
        .map_or(id, |end| &id[..end]);
    let others = KINDS.len() - 1;
    KINDS[..others]
        .iter()
        .position(|k| k.as_bytes() == prefix)
        .unwrap_or(others)
}

/// `breakdown.kind_figures`: per kind in `KINDS` order, (count, mean drift, the index of
/// its max drift's anchor) of its anchors, None when it has none. Each kind's sum runs over
/// its anchors in log order, as Python's `sum` of the kind's list does.
fn kind_figures(anchors: &[Anchor], compensated: bool) -> [Option<(usize, f64, usize)>; 8] {
    let mut sums = [(0_usize, PythonSum::default(), 0_usize); 8];
    for (i, anchor) in anchors.iter().enumerate() {
        let (count, sum, max_at) = &mut sums[kind_of(&anchor.anchor_id)];
        // Python's max(): the first of equal values wins.
        if *count == 0 || anchor.drift_score > anchors[*max_at].drift_score {
            *max_at = i;
        }
        *count += 1;
        sum.add(anchor.drift_score, compensated);
    }
    sums.map(|(count, sum, max_at)| {
        (count > 0).then(|| (count, sum.total() / count as f64, max_at))
    })
}

/// `breakdown.anchor_order`: `a` ranks before `b` (higher drift, then lower position, then
/// the lower id; Rust orders `str` by its UTF-8 bytes, which is Python's order by code
/// point).
fn ranks_before(a: &Anchor, b: &Anchor) -> bool {
    if a.drift_score != b.drift_score {
        return a.drift_score > b.drift_score;
    }
    (a.position, &*a.anchor_id) < (b.position, &*b.anchor_id)
}

/// `breakdown.top_anchors`: the indexes of the first `TOP_ANCHORS_PER_EVENT` by
/// `ranks_before`, best first, in one pass (Python sorts the whole log; anchors with equal
/// keys write equal bytes, so which of them is kept does not show).
fn top_anchors(anchors: &[Anchor]) -> Vec<usize> {
    let mut top: Vec<usize> = Vec::with_capacity(TOP_ANCHORS_PER_EVENT + 1);
    for (i, anchor) in anchors.iter().enumerate() {
        if top.len() == TOP_ANCHORS_PER_EVENT && !ranks_before(anchor, &anchors[top[top.len() - 1]])
        {
            continue;
        }
        let at = top
            .iter()
            .position(|&t| ranks_before(anchor, &anchors[t]))
            .unwrap_or(top.len());
        top.insert(at, i);
        top.truncate(TOP_ANCHORS_PER_EVENT);
    }
    top
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
#[derive(Clone, Copy, Default)]
struct PythonSum {
    total: f64,
    compensation: f64,
}

impl PythonSum {
    fn add(&mut self, x: f64, compensated: bool) {
        let t = self.total + x;
        if compensated {
            self.compensation += if self.total.abs() >= x.abs() {
                (self.total - t) + x
            } else {
                (x - t) + self.total
            };
        }
        self.total = t;
    }

    fn total(self) -> f64 {
        if self.compensation != 0.0 && self.compensation.is_finite() {
            self.total + self.compensation
        } else {
            self.total
        }
    }
}

fn python_sum(values: impl Iterator<Item = f64>, compensated: bool) -> f64 {
    let mut sum = PythonSum::default();
    values.for_each(|x| sum.add(x, compensated));
    sum.total()
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
