package dev.anchorwatch.flink;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.flink.table.data.RowData;
import org.apache.flink.types.Row;

/**
 * One record of the snapshot topic as the drift job reads it: the top-level fields it
 * needs, flat (numbers unboxed, strings as ranges of one UTF-8 array), each present or
 * NULL, or the record's text as payload when it is not a snapshot at all; and where it
 * came from. A binary summary fills one straight from its bytes ({@link
 * BinarySummaryDecoder.Fields}), its strings ranges of the Kafka record's own array; a JSON
 * record is copied from the row its decoder gives, its breakdown read from the JSON text of
 * {@code kinds} and {@code top_anchors} ({@link BreakdownParser}). The breakdown goes into
 * the {@link EventBreakdown} its source task lends each record in turn. Never leaves its
 * source's task.
 */
public final class SnapshotRecord implements BinarySummaryDecoder.Fields {

    /** Decoded columns in this order, then the payload column. */
    static final String[] COLUMNS = {
        "event_id", "event_time_ms", "doc_type", "snapshot_status", "anchor_count",
        "mean_drift", "max_drift", "max_kl_divergence", "resample_count", "model",
        "latency_ms", "kinds", "top_anchors", "unparsable_payload"
    };

    static final int EVENT_ID = 0;
    static final int EVENT_TIME_MS = 1;
    static final int DOC_TYPE = 2;
    static final int SNAPSHOT_STATUS = 3;
    static final int ANCHOR_COUNT = 4;
    static final int MEAN_DRIFT = 5;
    static final int MAX_DRIFT = 6;
    static final int MAX_KL_DIVERGENCE = 7;
    static final int RESAMPLE_COUNT = 8;
    static final int MODEL = 9;
    static final int LATENCY_MS = 10;
    static final int KINDS = 11;
    static final int TOP_ANCHORS = 12;
    static final int PAYLOAD = 13;

    /** Columns whose JSON value (an object, an array) the decoders give as its text. */
    static final java.util.Set<String> JSON_COLUMNS = java.util.Set.of("kinds", "top_anchors");

    /**
     * Columns of {@link #toRow}, for the job's SQL (dead letters, late tallies): the
     * decoded ones up to resample_count, then the payload.
     */
    static final String[] ROW_COLUMNS = {
        "event_id", "event_time_ms", "doc_type", "snapshot_status", "anchor_count",
        "mean_drift", "max_drift", "max_kl_divergence", "resample_count", "unparsable_payload"
    };

    private static final int ROW_PAYLOAD = 9;

    /** breakdown.LATENCY_MAX_MS: a longer latency, or a negative one, reads as none. */
    static final int LATENCY_MAX_MS = 3_600_000;

    /** The two snapshot statuses a valid record may have, as UTF-8. */
    private static final byte[] ACTIVE = "active".getBytes(StandardCharsets.UTF_8);

    private static final byte[] DISABLED = "disabled".getBytes(StandardCharsets.UTF_8);

    final int partition;
    final long offset;

    /** Bit {@code 1 << column} set when the column is not NULL. */
    private int present;

    /** The UTF-8 every string column is a range of. */
    byte[] text;

    int idFrom;
    int idLength;
    int docTypeFrom;
    int docTypeLength;
    int statusFrom;
    int statusLength;
    long eventTimeMs;
    int anchorCount;
    double meanDrift;
    double maxDrift;
    double maxKlDivergence;
    int resampleCount;
    int modelFrom;
    int modelLength;
    int latencyMs;

    /** The kinds and top anchors read (lent by the source task), or null: none. */
    EventBreakdown breakdown;

    /** The record's text when it is not a snapshot (no column is then present). */
    String payload;

    SnapshotRecord(int partition, long offset) {
        this.partition = partition;
        this.offset = offset;
    }

    /** A record that is not a snapshot: every column NULL, its text as payload. */
    static SnapshotRecord unparsable(String payload, int partition, long offset) {
        SnapshotRecord record = new SnapshotRecord(partition, offset);
        record.payload = payload;
        return record;
    }

    /**
     * The record a JSON decoder's row (columns {@link #COLUMNS}, payload last) stands for.
     * Its strings' bytes are copied into one array; its breakdown goes into {@code
     * breakdown} (reset first).
     */
    static SnapshotRecord of(RowData row, int partition, long offset, EventBreakdown breakdown) {
        SnapshotRecord record = new SnapshotRecord(partition, offset);
        if (!row.isNullAt(PAYLOAD)) {
            record.payload = row.getString(PAYLOAD).toString();
            return record;
        }
        record.breakdown = breakdown.reset();
        if (!row.isNullAt(KINDS)) {
            byte[] json = row.getString(KINDS).toBytes();
            BreakdownParser.kinds(json, 0, json.length, breakdown);
        }
        if (!row.isNullAt(TOP_ANCHORS)) {
            byte[] json = row.getString(TOP_ANCHORS).toBytes();
            BreakdownParser.topAnchors(json, 0, json.length, breakdown);
        }
        if (!row.isNullAt(LATENCY_MS)) {
            record.setLong(LATENCY_MS, row.getInt(LATENCY_MS));
        }
        ByteArrayOutputStream text = new ByteArrayOutputStream(64);
        for (int column : new int[] {EVENT_ID, DOC_TYPE, SNAPSHOT_STATUS, MODEL}) {
            if (row.isNullAt(column)) {
                continue;
            }
            byte[] utf8 = row.getString(column).toBytes();
            record.setText(column, text.size(), utf8.length);
            text.write(utf8, 0, utf8.length);
        }
        record.text = text.toByteArray();
        if (!row.isNullAt(EVENT_TIME_MS)) {
            record.setLong(EVENT_TIME_MS, row.getLong(EVENT_TIME_MS));
        }
        for (int column : new int[] {ANCHOR_COUNT, RESAMPLE_COUNT}) {
            if (!row.isNullAt(column)) {
                record.setLong(column, row.getInt(column));
            }
        }
        for (int column : new int[] {MEAN_DRIFT, MAX_DRIFT, MAX_KL_DIVERGENCE}) {
            if (!row.isNullAt(column)) {
                record.setDouble(column, row.getDouble(column));
            }
        }
        return record;
    }

    /**
     * The byte scanner's columns into a record (the deserializer's, one record after the
     * other): strings as ranges of the record's own bytes, the breakdown read straight from
     * them, in one pass when written as the contract writes it ({@link
     * BreakdownParser#fastKinds}).
     */
    static final class JsonColumns implements TopLevelFieldScanner.Columns {
        SnapshotRecord record;

        @Override
        public void text(int field, byte[] m, int from, int to) {
            if (field == KINDS) {
                // A JSON column's string is its text, as in the row.
                BreakdownParser.kinds(m, from, to, record.breakdown);
            } else if (field == TOP_ANCHORS) {
                BreakdownParser.topAnchors(m, from, to, record.breakdown);
            } else {
                record.text = m;
                record.setText(field, from, to - from);
            }
        }

        @Override
        public void integer(int field, long value) {
            record.setLong(field, value);
        }

        @Override
        public void real(int field, double value) {
            record.setDouble(field, value);
        }

        @Override
        public int json(int field, byte[] m, int p, int n) {
            EventBreakdown b = record.breakdown;
            int end = field == KINDS
                    ? BreakdownParser.fastKinds(m, p, n, b)
                    : BreakdownParser.fastTop(m, p, n, b);
            if (end >= 0) {
                return end;
            }
            end = JsonSyntax.skipJson(m, p, n);
            if (end >= 0) {
                if (field == KINDS) {
                    BreakdownParser.kinds(m, p, end, b);
                } else {
                    BreakdownParser.topAnchors(m, p, end, b);
                }
            }
            return end;
        }
    }

    /** Per field of a binary summary (its schema's order), its column; -1: not read here. */
    private static final int[] COLUMN_OF_FIELD =
            BinarySummaryDecoder.columnsOf(Arrays.asList(COLUMNS));

    // BinarySummaryDecoder.Fields: a binary summary's fields. Its strings all lie in the one
    // record's array.

    @Override
    public void text(int field, byte[] array, int from, int length) {
        int column = COLUMN_OF_FIELD[field];
        if (column >= 0) {
            text = array;
            setText(column, from, length);
        }
    }

    @Override
    public void integer(int field, long value) {
        setLong(COLUMN_OF_FIELD[field], value);
    }

    @Override
    public void real(int field, double value) {
        setDouble(COLUMN_OF_FIELD[field], value);
    }

    @Override
    public void breakdown() {
        // A v2 summary: its breakdown, maybe empty. The holder is lent by the caller.
    }

    @Override
    public void kind(int kind, byte[] array, int nameFrom, int nameLength, long anchors,
            double mean, double max) {
        breakdown.kind(kind, anchors, mean, max);
    }

    @Override
    public void topAnchor(boolean printable, byte[] array, int idFrom, int idLength,
            long position, double drift) {
        if (printable) {
            breakdown.topAnchorAscii(array, idFrom, idLength, position, drift);
        } else {
            breakdown.topAnchor(array, idFrom, idLength, position, drift);
        }
    }

    @Override
    public void endBreakdown() {
        breakdown.endKinds();
    }

    private void setText(int column, int from, int length) {
        present |= 1 << column;
        if (column == EVENT_ID) {
            idFrom = from;
            idLength = length;
        } else if (column == DOC_TYPE) {
            docTypeFrom = from;
            docTypeLength = length;
        } else if (column == MODEL) {
            modelFrom = from;
            modelLength = length;
        } else {
            statusFrom = from;
            statusLength = length;
        }
    }

    /** An integer column (the int columns hold what an INT holds: their decoders check). */
    private void setLong(int column, long value) {
        present |= 1 << column;
        if (column == EVENT_TIME_MS) {
            eventTimeMs = value;
        } else if (column == ANCHOR_COUNT) {
            anchorCount = (int) value;
        } else if (column == LATENCY_MS) {
            latencyMs = (int) value;
        } else {
            resampleCount = (int) value;
        }
    }

    private void setDouble(int column, double value) {
        present |= 1 << column;
        if (column == MEAN_DRIFT) {
            meanDrift = value;
        } else if (column == MAX_DRIFT) {
            maxDrift = value;
        } else {
            maxKlDivergence = value;
        }
    }

    boolean isNullAt(int column) {
        return column == PAYLOAD ? payload == null : (present & (1 << column)) == 0;
    }

    boolean hasEventTime() {
        return !isNullAt(EVENT_TIME_MS);
    }

    long eventTimeMs() {
        return eventTimeMs;
    }

    /**
     * Whether every check of the drift job passes (jobs/drift_job.py _CHECKS, the same
     * conditions in the same terms: a length is SQL's CHAR_LENGTH, in code points).
     */
    boolean isValid(int maxIdChars, int maxDocTypeChars) {
        if (payload != null) {
            return false;
        }
        if (isNullAt(EVENT_ID) || longerThan(idFrom, idLength, maxIdChars)) {
            return false;
        }
        if (isNullAt(EVENT_TIME_MS)) {
            return false;
        }
        if (isNullAt(DOC_TYPE)
                || docTypeLength == 0
                || longerThan(docTypeFrom, docTypeLength, maxDocTypeChars)) {
            return false;
        }
        if (isNullAt(SNAPSHOT_STATUS)
                || !(statusIs(ACTIVE) || statusIs(DISABLED))) {
            return false;
        }
        if (isNullAt(ANCHOR_COUNT) || anchorCount < 0) {
            return false;
        }
        if (isNullAt(MEAN_DRIFT)) {
            return false;
        }
        // As SQL: NOT (drift < 0 OR drift > 1), which lets NaN through as SQL would.
        return !(meanDrift < 0 || meanDrift > 1);
    }

    /** Whether this valid record's status is "disabled". */
    boolean isDisabled() {
        return statusIs(DISABLED);
    }

    private boolean statusIs(byte[] word) {
        // A few bytes: the lengths differ for the other status, so a plain loop is cheapest.
        if (statusLength != word.length) {
            return false;
        }
        for (int i = 0; i < word.length; i++) {
            if (text[statusFrom + i] != word[i]) {
                return false;
            }
        }
        return true;
    }

    /**
     * SQL's {@code CHAR_LENGTH(s) > max} over valid UTF-8: code points are the bytes that do
     * not continue a sequence; no count needed when the bytes are few enough.
     */
    private boolean longerThan(int from, int length, int max) {
        if (length <= max) {
            return false;
        }
        int chars = 0;
        for (int i = from; i < from + length; i++) {
            if ((text[i] & 0xC0) != 0x80) {
                chars++;
            }
        }
        return chars > max;
    }

    /** Whether the record names a model (a string; the route holds it to the contract). */
    boolean hasModel() {
        return !isNullAt(MODEL);
    }

    /** The request's latency in ms, or -1: none, or outside the contract's 0 to an hour. */
    int latency() {
        return isNullAt(LATENCY_MS) || latencyMs < 0 || latencyMs > LATENCY_MAX_MS
                ? -1
                : latencyMs;
    }

    /** The doc type (a valid record's), decoded. */
    String docType() {
        return string(docTypeFrom, docTypeLength);
    }

    private String string(int from, int length) {
        return new String(text, from, length, StandardCharsets.UTF_8);
    }

    /** The record for SQL (dead letters, late tallies): {@link #ROW_COLUMNS}, then where and why. */
    Row toRow(boolean late) {
        Row out = new Row(ROW_COLUMNS.length + 3);
        out.setField(EVENT_ID, isNullAt(EVENT_ID) ? null : string(idFrom, idLength));
        out.setField(DOC_TYPE, isNullAt(DOC_TYPE) ? null : docType());
        out.setField(
                SNAPSHOT_STATUS,
                isNullAt(SNAPSHOT_STATUS) ? null : string(statusFrom, statusLength));
        out.setField(ROW_PAYLOAD, payload);
        out.setField(EVENT_TIME_MS, isNullAt(EVENT_TIME_MS) ? null : eventTimeMs);
        out.setField(ANCHOR_COUNT, isNullAt(ANCHOR_COUNT) ? null : anchorCount);
        out.setField(RESAMPLE_COUNT, isNullAt(RESAMPLE_COUNT) ? null : resampleCount);
        out.setField(MEAN_DRIFT, isNullAt(MEAN_DRIFT) ? null : meanDrift);
        out.setField(MAX_DRIFT, isNullAt(MAX_DRIFT) ? null : maxDrift);
        out.setField(
                MAX_KL_DIVERGENCE, isNullAt(MAX_KL_DIVERGENCE) ? null : maxKlDivergence);
        out.setField(ROW_COLUMNS.length, partition);
        out.setField(ROW_COLUMNS.length + 1, offset);
        out.setField(ROW_COLUMNS.length + 2, late);
        return out;
    }
}
