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
 * record is copied from the row its decoder gives. Never leaves its source's task.
 */
public final class SnapshotRecord implements BinarySummaryDecoder.Fields {

    /** Decoded columns in this order, then the payload column. */
    static final String[] COLUMNS = {
        "event_id", "event_time_ms", "doc_type", "snapshot_status", "anchor_count",
        "mean_drift", "max_drift", "max_kl_divergence", "resample_count", "unparsable_payload"
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
    static final int PAYLOAD = 9;

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
     * Its strings' bytes are copied into one array.
     */
    static SnapshotRecord of(RowData row, int partition, long offset) {
        SnapshotRecord record = new SnapshotRecord(partition, offset);
        if (!row.isNullAt(PAYLOAD)) {
            record.payload = row.getString(PAYLOAD).toString();
            return record;
        }
        ByteArrayOutputStream text = new ByteArrayOutputStream(64);
        for (int column : new int[] {EVENT_ID, DOC_TYPE, SNAPSHOT_STATUS}) {
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

    private void setText(int column, int from, int length) {
        present |= 1 << column;
        if (column == EVENT_ID) {
            idFrom = from;
            idLength = length;
        } else if (column == DOC_TYPE) {
            docTypeFrom = from;
            docTypeLength = length;
        } else {
            statusFrom = from;
            statusLength = length;
        }
    }

    /** An integer column (both int columns hold what an INT holds: their decoders check). */
    private void setLong(int column, long value) {
        present |= 1 << column;
        if (column == EVENT_TIME_MS) {
            eventTimeMs = value;
        } else if (column == ANCHOR_COUNT) {
            anchorCount = (int) value;
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

    /** The doc type (a valid record's), decoded. */
    String docType() {
        return string(docTypeFrom, docTypeLength);
    }

    private String string(int from, int length) {
        return new String(text, from, length, StandardCharsets.UTF_8);
    }

    /** The record for SQL (dead letters, late tallies): the columns, then where and why. */
    Row toRow(boolean late) {
        Row out = new Row(COLUMNS.length + 3);
        out.setField(EVENT_ID, isNullAt(EVENT_ID) ? null : string(idFrom, idLength));
        out.setField(DOC_TYPE, isNullAt(DOC_TYPE) ? null : docType());
        out.setField(
                SNAPSHOT_STATUS,
                isNullAt(SNAPSHOT_STATUS) ? null : string(statusFrom, statusLength));
        out.setField(PAYLOAD, payload);
        out.setField(EVENT_TIME_MS, isNullAt(EVENT_TIME_MS) ? null : eventTimeMs);
        out.setField(ANCHOR_COUNT, isNullAt(ANCHOR_COUNT) ? null : anchorCount);
        out.setField(RESAMPLE_COUNT, isNullAt(RESAMPLE_COUNT) ? null : resampleCount);
        out.setField(MEAN_DRIFT, isNullAt(MEAN_DRIFT) ? null : meanDrift);
        out.setField(MAX_DRIFT, isNullAt(MAX_DRIFT) ? null : maxDrift);
        out.setField(
                MAX_KL_DIVERGENCE, isNullAt(MAX_KL_DIVERGENCE) ? null : maxKlDivergence);
        out.setField(COLUMNS.length, partition);
        out.setField(COLUMNS.length + 1, offset);
        out.setField(COLUMNS.length + 2, late);
        return out;
    }
}
