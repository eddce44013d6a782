package dev.anchorwatch.flink;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.core.memory.MemorySegment;
import org.apache.flink.table.data.binary.BinarySection;
import org.apache.flink.table.data.binary.BinaryStringData;
import org.apache.flink.types.Row;

/**
 * One record of the snapshot topic as the drift job reads it: the decoded top-level fields
 * (columns {@link #COLUMNS}, a row of NULLs with the text in the payload column for a record
 * that is not a JSON object) and where it came from. Never leaves its source's task.
 */
public final class SnapshotRecord {

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

    final RowData row;
    final int partition;
    final long offset;

    SnapshotRecord(RowData row, int partition, long offset) {
        this.row = row;
        this.partition = partition;
        this.offset = offset;
    }

    boolean hasEventTime() {
        return !row.isNullAt(EVENT_TIME_MS);
    }

    long eventTimeMs() {
        return row.getLong(EVENT_TIME_MS);
    }

    /**
     * Whether every check of the drift job passes (jobs/drift_job.py _CHECKS, the same
     * conditions in the same terms: a length is SQL's CHAR_LENGTH, in code points).
     */
    boolean isValid(int maxIdChars, int maxDocTypeChars) {
        RowData r = row;
        if (!r.isNullAt(PAYLOAD)) {
            return false;
        }
        if (r.isNullAt(EVENT_ID) || longerThan(r.getString(EVENT_ID), maxIdChars)) {
            return false;
        }
        if (r.isNullAt(EVENT_TIME_MS)) {
            return false;
        }
        if (r.isNullAt(DOC_TYPE)) {
            return false;
        }
        StringData docType = r.getString(DOC_TYPE);
        if (isEmpty(docType) || longerThan(docType, maxDocTypeChars)) {
            return false;
        }
        if (r.isNullAt(SNAPSHOT_STATUS)) {
            return false;
        }
        StringData status = r.getString(SNAPSHOT_STATUS);
        if (!is(status, ACTIVE) && !is(status, DISABLED)) {
            return false;
        }
        if (r.isNullAt(ANCHOR_COUNT) || r.getInt(ANCHOR_COUNT) < 0) {
            return false;
        }
        if (r.isNullAt(MEAN_DRIFT)) {
            return false;
        }
        double drift = r.getDouble(MEAN_DRIFT);
        // As SQL: NOT (drift < 0 OR drift > 1), which lets NaN through as SQL would.
        return !(drift < 0 || drift > 1);
    }

    /** Whether the string's UTF-8 is {@code word}. */
    static boolean is(StringData s, byte[] word) {
        Utf8 utf8 = Utf8.of(s);
        return Arrays.equals(utf8.array, utf8.from, utf8.from + utf8.length, word, 0, word.length);
    }

    /** Whether this valid record's status is "disabled". */
    boolean isDisabled() {
        return is(row.getString(SNAPSHOT_STATUS), DISABLED);
    }

    /**
     * A string's UTF-8 where it lies: the bytes a decoder wrapped (a record's own array),
     * else a copy. Read per event, so not copied when it need not be.
     */
    static final class Utf8 {
        final byte[] array;
        final int from;
        final int length;

        private Utf8(byte[] array, int from, int length) {
            this.array = array;
            this.from = from;
            this.length = length;
        }

        static Utf8 of(StringData s) {
            if (s instanceof BinaryStringData) {
                BinarySection section = ((BinaryStringData) s).getBinarySection();
                if (section != null && section.getSegments().length == 1) {
                    MemorySegment segment = section.getSegments()[0];
                    if (!segment.isOffHeap()) {
                        return new Utf8(
                                segment.getArray(), section.getOffset(), section.getSizeInBytes());
                    }
                }
            }
            byte[] bytes = s.toBytes();
            return new Utf8(bytes, 0, bytes.length);
        }
    }

    private static boolean isEmpty(StringData s) {
        return s instanceof BinaryStringData
                ? ((BinaryStringData) s).getSizeInBytes() == 0
                : s.toString().isEmpty();
    }

    /** SQL's {@code CHAR_LENGTH(s) > max}; no count needed when the bytes are few enough. */
    private static boolean longerThan(StringData s, int max) {
        if (s instanceof BinaryStringData) {
            BinaryStringData b = (BinaryStringData) s;
            return b.getSizeInBytes() > max && b.numChars() > max;
        }
        String text = s.toString();
        return text.codePointCount(0, text.length()) > max;
    }

    /** The record for SQL (dead letters, late tallies): the columns, then where and why. */
    Row toRow(boolean late) {
        RowData r = row;
        Row out = new Row(COLUMNS.length + 3);
        for (int i : new int[] {EVENT_ID, DOC_TYPE, SNAPSHOT_STATUS, PAYLOAD}) {
            out.setField(i, r.isNullAt(i) ? null : r.getString(i).toString());
        }
        out.setField(EVENT_TIME_MS, r.isNullAt(EVENT_TIME_MS) ? null : r.getLong(EVENT_TIME_MS));
        for (int i : new int[] {ANCHOR_COUNT, RESAMPLE_COUNT}) {
            out.setField(i, r.isNullAt(i) ? null : r.getInt(i));
        }
        for (int i : new int[] {MEAN_DRIFT, MAX_DRIFT, MAX_KL_DIVERGENCE}) {
            out.setField(i, r.isNullAt(i) ? null : r.getDouble(i));
        }
        out.setField(COLUMNS.length, partition);
        out.setField(COLUMNS.length + 1, offset);
        out.setField(COLUMNS.length + 2, late);
        return out;
    }
}
