//! The ingest service's per-event path, compiled: a Kong http-log body (or one NDJSON line)
//! in, validated snapshot events out, encoded byte for byte as `contracts.encode` writes
//! them. Python calls it once per request (`records.kong_body`) or line (`ndjson_body`).
//!
//! It only ever decides what is accepted. An entry or line it does not accept, for whatever
//! reason, comes back as None and takes the reference path (orjson and the pydantic
//! contract), which accepts it or says exactly why not; so does a whole body that it cannot
//! read (`kong` returns None). Hence the rule for every check in this crate: refuse whenever
//! the reference might answer differently. tests/unit/connectors/test_fastpath.py holds both
//! paths equal on generated, malformed and hypothesis-made input.
//!
//! The contract's bounds are constants (in `snapshot`); `contract()` describes them, and
//! `connectors/validation.py` compares that description with the pydantic model at import,
//! so a change to the model that is not made here too stops the service from starting.
//!
//! This file is what Python sees: `contract()`, `SnapshotReader` and the module. The rest:
//!
//! - `read`: reading JSON as strictly as orjson does (strings, anchors, skipped values);
//! - `kong`: a Kong body's entries, and an entry's snapshot event (`kong.kong_record`);
//! - `model`: an entry's model version from its request body, route or service;
//! - `latency`: an entry's request latency (`latencies.request`);
//! - `ndjson`: the snapshot event an NDJSON line holds;
//! - `snapshot`: the contract's bounds, an event's values and the checks of them;
//! - `encode`: an accepted event written as `contracts.encode` writes it;
//! - `summary`: its summary, as `contracts.avro.encode_summary` writes it.

mod encode;
mod kong;
mod latency;
mod model;
mod ndjson;
mod read;
mod snapshot;
mod summary;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use kong::{kong_events, Config, ModelFrom};
use ndjson::Snapshot;
use snapshot::{
    Event, ANCHORS_MAX, ANCHOR_COUNT_LE, DOC_TYPE_MAX_CHARS, EPOCH_MS_GE, EPOCH_MS_LT,
    IDENTIFIER_MAX_CHARS, KINDS, LATENCY_MAX_MS, MODEL_VERSION_MAX_CHARS, RECOMMENDATION_MAX_CHARS,
    RESAMPLE, SNAPSHOT_STATUSES, SOURCE_MAX_CHARS, TOP_ANCHORS_PER_EVENT,
};

/// The contract's bounds (`snapshot`), in the shape `validation.describe` gives the pydantic
/// model, the recommendation counted as a re-sample, and the breakdown's kinds and number
/// of top anchors (`anchorwatch.contracts.breakdown`).
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
            "model": {"required": false, "default": null, "optional": true, "type": "str",
                      "min_length": 1, "max_length": MODEL_VERSION_MAX_CHARS,
                      "printable": false, "rule": "model_version_text"},
            "latency_ms": {"required": false, "default": null, "optional": true, "type": "int",
                           "ge": 0, "le": LATENCY_MAX_MS},
        },
        "RESAMPLE": RESAMPLE,
        "KINDS": KINDS,
        "TOP_ANCHORS_PER_EVENT": TOP_ANCHORS_PER_EVENT,
    })
    .to_string()
}

/// Reads request bodies with the service's header configuration.
#[pyclass(frozen, module = "anchorwatch.connectors._native")]
struct SnapshotReader {
    config: Config,
    /// `validation.Accepted`, built for each accepted event (id, doc type, record, summary).
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
        model_from: String,
        summary_header: Vec<u8>,
    ) -> PyResult<Self> {
        // `kong.KongFormat.model_from`: request_body_model, header:<name>, route, service.
        let (model_from, model_header) = match model_from.as_str() {
            "request_body_model" => (ModelFrom::RequestBody, String::new()),
            "route" => (ModelFrom::Route, String::new()),
            "service" => (ModelFrom::Service, String::new()),
            other => match other.strip_prefix("header:") {
                Some(name) if !name.is_empty() => (ModelFrom::Header, name.to_lowercase()),
                _ => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "unknown model_from {other:?}"
                    )))
                }
            },
        };
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
            vec![0], // the model's header: the request's
        ];
        Ok(SnapshotReader {
            config: Config {
                names: [
                    doc_type,
                    snapshot_status,
                    anchor_count,
                    snapshot_log,
                    request_id,
                    model_header,
                ],
                locations,
                trusted,
                model_from,
                summary_header,
            },
            accepted,
            compensated_sum: py.version_info() >= (3, 12),
        })
    }

    /// One Kong http-log body: per entry, its `Accepted` or None (take the reference path
    /// for it). None for the whole body when it is not one this reader can read. Events
    /// timed outside `earliest_ms..=latest_ms` are not accepted here. Without `summaries`,
    /// an `Accepted` has no summary (None: made from the record if ever asked for).
    #[pyo3(signature = (body, source, earliest_ms, latest_ms, summaries = true))]
    fn kong<'py>(
        &self,
        py: Python<'py>,
        body: &[u8],
        source: &str,
        earliest_ms: i64,
        latest_ms: i64,
        summaries: bool,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let window = (earliest_ms, latest_ms);
        let compensated = self.compensated_sum;
        // Reading, checking and encoding touch no Python object: other threads run meanwhile.
        let Some(events) =
            py.detach(|| kong_events(&self.config, body, source, window, compensated, summaries))
        else {
            return Ok(None);
        };
        let accepted = self.accepted.bind(py);
        let mut out = Vec::with_capacity(events.len());
        for event in events {
            out.push(match event {
                Some((event_id, doc_type, value, summary)) => Some(accepted.call1((
                    event_id,
                    doc_type,
                    PyBytes::new(py, &value),
                    summary.map(|s| PyBytes::new(py, &s)),
                ))?),
                None => None,
            });
        }
        PyList::new(py, out).map(Some)
    }

    /// One NDJSON line: its `Accepted`, or None (take the reference path). An event without
    /// a `source` gets ``source``. Without `summaries`, as for `kong`.
    #[pyo3(signature = (line, source, earliest_ms, latest_ms, summaries = true))]
    fn ndjson_line<'py>(
        &self,
        py: Python<'py>,
        line: &[u8],
        source: &str,
        earliest_ms: i64,
        latest_ms: i64,
        summaries: bool,
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
            model: event.model.as_deref(),
            latency_ms: event.latency_ms,
        }
        .encode(
            self.compensated_sum,
            (earliest_ms, latest_ms),
            summaries.then_some(&self.config.summary_header[..]),
        );
        match encoded {
            Some((value, summary)) => self
                .accepted
                .bind(py)
                .call1((
                    &*event.event_id,
                    &*event.doc_type,
                    PyBytes::new(py, &value),
                    summary.map(|s| PyBytes::new(py, &s)),
                ))
                .map(Some),
            None => Ok(None),
        }
    }
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<SnapshotReader>()?;
    module.add_function(wrap_pyfunction!(contract, module)?)?;
    Ok(())
}
