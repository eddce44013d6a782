//! The fuzz targets' checks on the ingest reader (connectors/native/src/lib.rs, compiled in
//! here as it is; see build.rs). Each target calls the reader's Python-facing methods, the
//! ones `records.py` calls, with an embedded interpreter, and panics (a finding) unless:
//!
//! - the reader neither panics nor raises;
//! - it decides the same input the same way twice;
//! - every event it accepts is a JSON object whose `event_id`, `doc_type` and `source` are
//!   the ones it returned and the one passed in;
//! - an accepted record, read again as an NDJSON line, is accepted as the same bytes.
//!
//! Whether the reference path (orjson + pydantic) agrees is checked in Python on the corpus
//! these targets grow: bench/fuzz_ingest.py, tests/unit/connectors/test_fuzz_corpus.py.

mod native {
    #![allow(dead_code)]
    include!(concat!(env!("OUT_DIR"), "/native.rs"));

    use std::sync::OnceLock;

    pub const SOURCE: &str = "fuzz";
    /// Stands in for the summary schema's marker and fingerprint (`contracts.avro`).
    const SUMMARY_HEADER: &[u8] = b"\xc3\x01fuzzfuzz";

    /// One accepted event as the reader hands it over: id, doc type, encoded record.
    pub type Record = (String, String, Vec<u8>);

    /// The contract's own time bounds, as `records.py` passes them without a window.
    const WINDOW: (i64, i64) = (EPOCH_MS_GE, EPOCH_MS_LT - 1);

    /// The Kong header layouts of the Python comparison (tests/support/fastpath.py `FORMATS`):
    /// the default (doc type trusted on the request, measurements on the response), the doc
    /// type trusted on both, everything on both but the request id, two names swapped; then
    /// the model version from a header, the route, the service, and the doc type's header.
    fn readers(py: Python<'_>) -> &'static [SnapshotReader] {
        static READERS: OnceLock<Vec<SnapshotReader>> = OnceLock::new();
        READERS.get_or_init(|| {
            // Stands in for `validation.Accepted`: hands its arguments back.
            let accepted = py
                .eval(c"lambda *args: args", None, None)
                .expect("a lambda")
                .unbind();
            let (req, resp, both): (&[&str], &[&str], &[&str]) =
                (&["request"], &["response"], &["request", "response"]);
            let reader =
                |doc_type: &str, request_id: &str, trusted: [&[&str]; 3], model_from: &str| {
                    let names =
                        |locations: &[&str]| locations.iter().map(|l| l.to_string()).collect();
                    SnapshotReader::new(
                        py,
                        doc_type.into(),
                        "x-anthropic-snapshot-status".into(),
                        "x-anthropic-anchor-count".into(),
                        "x-anthropic-snapshot-log".into(),
                        request_id.into(),
                        names(trusted[0]),
                        names(trusted[1]),
                        names(trusted[2]),
                        accepted.clone_ref(py),
                        model_from.into(),
                        SUMMARY_HEADER.to_vec(),
                    )
                    .expect("a reader")
                };
            let (doc_type, request_id) = ("x-anthropic-doc-type", "x-request-id");
            let body = "request_body_model";
            vec![
                reader(doc_type, request_id, [req, resp, both], body),
                reader(
                    doc_type,
                    request_id,
                    [&["response", "request"], resp, both],
                    body,
                ),
                reader(doc_type, request_id, [both, both, resp], body),
                reader(request_id, doc_type, [req, resp, both], body),
                reader(
                    doc_type,
                    request_id,
                    [req, resp, both],
                    "header:x-model-version",
                ),
                reader(doc_type, request_id, [req, resp, both], "route"),
                reader(doc_type, request_id, [req, resp, both], "service"),
                reader(
                    doc_type,
                    request_id,
                    [req, resp, both],
                    "header:x-anthropic-doc-type",
                ),
            ]
        })
    }

    fn record(item: &Bound<'_, PyAny>) -> Record {
        let (event_id, doc_type, value, summary): (
            String,
            String,
            Bound<'_, PyBytes>,
            Bound<'_, PyBytes>,
        ) = item
            .extract()
            .expect("accepted hands back (event_id, doc_type, bytes, summary bytes)");
        // Whether the summary is the one Python makes of the record is checked in Python
        // on the corpus (bench/fuzz_ingest.py); here, that there is one.
        assert!(summary.as_bytes().starts_with(SUMMARY_HEADER));
        (event_id, doc_type, value.as_bytes().to_vec())
    }

    /// `SnapshotReader.kong`: None for a body it leaves to the reference path, else per
    /// entry its record or None.
    fn kong_once(
        py: Python<'_>,
        reader: &SnapshotReader,
        body: &[u8],
    ) -> Option<Vec<Option<Record>>> {
        let entries = reader
            .kong(py, body, SOURCE, WINDOW.0, WINDOW.1, true)
            .expect("kong raised")?;
        Some(
            entries
                .iter()
                .map(|item| (!item.is_none()).then(|| record(&item)))
                .collect(),
        )
    }

    fn ndjson_once(py: Python<'_>, reader: &SnapshotReader, line: &[u8]) -> Option<Record> {
        let item = reader
            .ndjson_line(py, line, SOURCE, WINDOW.0, WINDOW.1, true)
            .expect("ndjson_line raised")?;
        Some(record(&item))
    }

    /// What every accepted record must satisfy, whichever format it came from.
    fn check_record(
        py: Python<'_>,
        reader: &SnapshotReader,
        record: &Record,
        source: Option<&str>,
    ) {
        let (event_id, doc_type, value) = record;
        let json: serde_json::Value =
            serde_json::from_slice(value).expect("an accepted record is JSON");
        let object = json.as_object().expect("an accepted record is an object");
        assert_eq!(object["event_id"].as_str(), Some(event_id.as_str()));
        assert_eq!(object["doc_type"].as_str(), Some(doc_type.as_str()));
        if let Some(source) = source {
            assert_eq!(object["source"].as_str(), Some(source));
        }
        // The record is a valid event in the NDJSON format: read again, it is itself.
        assert_eq!(
            ndjson_once(py, reader, value).as_ref(),
            Some(record),
            "not a fixed point"
        );
    }

    pub fn kong(body: &[u8]) {
        Python::attach(|py| {
            for reader in readers(py) {
                let decided = kong_once(py, reader, body);
                assert_eq!(
                    decided,
                    kong_once(py, reader, body),
                    "decided differently twice"
                );
                for record in decided.iter().flatten().flatten() {
                    check_record(py, reader, record, Some(SOURCE));
                }
            }
        })
    }

    /// Each line of the body as `records.ndjson_body` splits it.
    pub fn ndjson(body: &[u8]) {
        Python::attach(|py| {
            let reader = &readers(py)[0];
            for line in body.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let decided = ndjson_once(py, reader, line);
                assert_eq!(
                    decided,
                    ndjson_once(py, reader, line),
                    "decided differently twice"
                );
                if let Some(record) = &decided {
                    check_record(py, reader, record, None);
                }
            }
        })
    }
}

pub use native::{kong, ndjson};
