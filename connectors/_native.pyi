"""Types of the compiled fast path (connectors/native/src/lib.rs)."""

from anchorwatch.connectors.validation import Accepted

def contract() -> str: ...

class SnapshotReader:
    def __init__(
        self,
        doc_type: str,
        snapshot_status: str,
        anchor_count: str,
        snapshot_log: str,
        request_id: str,
        doc_type_locations: list[str],
        measurement_locations: list[str],
        request_id_locations: list[str],
        accepted: type[Accepted],
        model_from: str,
        summary_header: bytes,
    ) -> None: ...
    def kong(
        self, body: bytes, source: str, earliest_ms: int, latest_ms: int, summaries: bool = True
    ) -> list[Accepted | None] | None: ...
    def ndjson_line(
        self, line: bytes, source: str, earliest_ms: int, latest_ms: int, summaries: bool = True
    ) -> Accepted | None: ...
