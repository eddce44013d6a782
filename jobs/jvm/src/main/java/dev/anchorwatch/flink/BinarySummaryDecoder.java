package dev.anchorwatch.flink;

import java.io.Serializable;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;

import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.types.logical.LogicalTypeRoot;
import org.apache.flink.table.types.logical.RowType;

/**
 * Decodes a summaries-topic record in its binary form: {@code SnapshotSummary} in Avro's
 * single-object encoding (anchorwatch/contracts/schemas/snapshot-summary.v2.avsc, written
 * by anchorwatch/contracts/avro.py, or v1 from before the model, the latency and the
 * breakdown), field by field in the schema's order, into the columns a table declares under
 * the same names. No text is tokenised: strings are length-prefixed, numbers are varints and
 * little-endian doubles. A v1 record has no model, latency, kinds or top anchors (NULL).
 *
 * <p>A record that starts with the single-object marker is this decoder's, whole: a wrong
 * fingerprint (another schema), a truncated or overlong record, a varint out of range, an
 * unknown union branch or a string that is not UTF-8 is {@link Unreadable}, which the
 * caller turns into a payload row and so a dead letter that names the problem. The
 * contract's rules on the values (lengths, ranges, statuses, kinds) are the job's checks,
 * as for JSON ({@link EventBreakdown} for the breakdown).
 */
final class BinarySummaryDecoder implements Serializable {

    private static final long serialVersionUID = 1L;

    /**
     * The single-object marker, then snapshot-summary.v2's CRC-64-AVRO fingerprint,
     * little-endian (anchorwatch/contracts/avro.py summary_fingerprint).
     */
    static final byte[] HEADER = {
        (byte) 0xC3, 0x01,
        (byte) 0x89, 0x7C, 0x0D, (byte) 0xDF, 0x35, (byte) 0xA2, 0x6F, 0x01
    };

    /** The same for snapshot-summary.v1. */
    static final byte[] HEADER_V1 = {
        (byte) 0xC3, 0x01,
        (byte) 0xE5, (byte) 0xA6, (byte) 0xBB, 0x22, 0x26, (byte) 0xCF, 0x1A, 0x64
    };

    /**
     * The v2 schema's fields in order (the binary form has no names: the order is the
     * format); v1 has the same without model, latency_ms, kinds and top_anchors.
     */
    private static final String[] FIELDS = {
        "event_id", "event_time_ms", "doc_type", "snapshot_status", "anchor_count", "source",
        "model", "latency_ms", "mean_drift", "max_drift", "max_kl_divergence",
        "resample_count", "kinds", "top_anchors"
    };

    static final int EVENT_ID = 0;
    static final int EVENT_TIME_MS = 1;
    static final int DOC_TYPE = 2;
    static final int SNAPSHOT_STATUS = 3;
    static final int ANCHOR_COUNT = 4;
    static final int SOURCE = 5;
    static final int MODEL = 6;
    static final int LATENCY_MS = 7;
    static final int MEAN_DRIFT = 8;
    static final int MAX_DRIFT = 9;
    static final int MAX_KL_DIVERGENCE = 10;
    static final int RESAMPLE_COUNT = 11;
    static final int KINDS = 12;
    static final int TOP_ANCHORS = 13;

    /** The fewest bytes a kinds entry (name, count, two doubles) or a top anchor takes. */
    private static final int MIN_ENTRY_BYTES = 10;

    private static final VarHandle LITTLE_ENDIAN_LONG =
            MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    /** Each header's first eight bytes as one number, to compare once per record. */
    private static final long HEADER_START = (long) LITTLE_ENDIAN_LONG.get(HEADER, 0);

    private static final long HEADER_V1_START = (long) LITTLE_ENDIAN_LONG.get(HEADER_V1, 0);

    /** Per schema field, the column it decodes into, or -1 when the table has none. */
    private final int[] columnOf;

    /** Per schema field, whether its column is an INT (else a BIGINT for an int field). */
    private final boolean[] intColumn;

    private BinarySummaryDecoder(int[] columnOf, boolean[] intColumn) {
        this.columnOf = columnOf;
        this.intColumn = intColumn;
    }

    /**
     * A decoder into {@code rowType}'s columns, or null when a column named as a summary
     * field has a type the field cannot fill (a string column for a string field, BIGINT
     * for the long, INT or BIGINT for an int, DOUBLE for a double).
     */
    static BinarySummaryDecoder forRowType(RowType rowType) {
        int[] columnOf = columnsOf(rowType.getFieldNames());
        boolean[] intColumn = new boolean[FIELDS.length];
        for (int f = 0; f < FIELDS.length; f++) {
            int column = columnOf[f];
            if (column < 0) {
                continue;
            }
            LogicalTypeRoot type = rowType.getTypeAt(column).getTypeRoot();
            boolean fits;
            switch (f) {
                case EVENT_TIME_MS:
                    fits = type == LogicalTypeRoot.BIGINT;
                    break;
                case ANCHOR_COUNT:
                case RESAMPLE_COUNT:
                case LATENCY_MS:
                    fits = type == LogicalTypeRoot.INTEGER || type == LogicalTypeRoot.BIGINT;
                    break;
                case MEAN_DRIFT:
                case MAX_DRIFT:
                case MAX_KL_DIVERGENCE:
                    fits = type == LogicalTypeRoot.DOUBLE;
                    break;
                default:
                    // Strings; kinds and top_anchors as their JSON text, as from JSON.
                    fits = type == LogicalTypeRoot.VARCHAR || type == LogicalTypeRoot.CHAR;
            }
            if (!fits) {
                return null;
            }
            intColumn[f] = type == LogicalTypeRoot.INTEGER;
        }
        return new BinarySummaryDecoder(columnOf, intColumn);
    }

    /** Per schema field, the index of the column of its name in {@code names}, or -1. */
    static int[] columnsOf(List<String> names) {
        int[] columnOf = new int[FIELDS.length];
        for (int f = 0; f < FIELDS.length; f++) {
            columnOf[f] = names.indexOf(FIELDS[f]);
        }
        return columnOf;
    }

    /** Whether the record claims to be a binary summary (starts with the marker). */
    static boolean isBinary(byte[] m) {
        return m != null && m.length >= 2 && m[0] == HEADER[0] && m[1] == HEADER[1];
    }

    /**
     * Reads a binary summary's fields into {@code out}, in the schema's order (the source,
     * model and latency only when not null; a v2 record's breakdown as {@link Fields#kind}
     * and {@link Fields#topAnchor} calls between {@link Fields#breakdown} and {@link
     * Fields#endBreakdown}). Strings are checked for UTF-8 and given as ranges of {@code m}.
     * On {@link Unreadable}, {@code out} may hold some fields: discard it.
     */
    static void read(byte[] m, Fields out) throws Unreadable {
        boolean v2;
        if (isHeader(m, HEADER_START, HEADER)) {
            v2 = true;
        } else if (isHeader(m, HEADER_V1_START, HEADER_V1)) {
            v2 = false;
        } else {
            throw new Unreadable("another schema (the fingerprint after the marker is neither"
                    + " snapshot-summary.v2's nor v1's)");
        }
        Reader in = new Reader(m, HEADER.length);
        in.string(EVENT_ID, out);
        out.integer(EVENT_TIME_MS, in.varlong());
        in.string(DOC_TYPE, out);
        in.string(SNAPSHOT_STATUS, out);
        out.integer(ANCHOR_COUNT, in.varint());
        if (in.branch(SOURCE)) {
            in.string(SOURCE, out);
        }
        if (v2) {
            if (in.branch(MODEL)) {
                in.string(MODEL, out);
            }
            if (in.branch(LATENCY_MS)) {
                out.integer(LATENCY_MS, in.varint());
            }
        }
        out.real(MEAN_DRIFT, in.doubleValue());
        out.real(MAX_DRIFT, in.doubleValue());
        out.real(MAX_KL_DIVERGENCE, in.doubleValue());
        out.integer(RESAMPLE_COUNT, in.varint());
        if (v2) {
            out.breakdown();
            for (long n = in.blockCount("kinds"); n > 0; n = in.blockCount("kinds")) {
                for (long i = 0; i < n; i++) {
                    int name = in.bytes();
                    int length = in.p - name;
                    int kind = EventBreakdown.kindIndex(m, name, length);
                    if (kind < 0) {
                        in.checkUtf8(name, in.p);
                    }
                    long anchors = in.varlong();
                    double mean = in.doubleValue();
                    out.kind(kind, m, name, length, anchors, mean, in.doubleValue());
                }
            }
            for (long n = in.blockCount("top_anchors"); n > 0;
                    n = in.blockCount("top_anchors")) {
                for (long i = 0; i < n; i++) {
                    int id = in.bytes();
                    int length = in.p - id;
                    // Printable ASCII, every id the contract writes, needs no other check.
                    boolean printable = EventBreakdown.isPrintableAscii(m, id, length);
                    if (!printable) {
                        in.checkUtf8(id, in.p);
                    }
                    long position = in.varlong();
                    out.topAnchor(printable, m, id, length, position, in.doubleValue());
                }
            }
            out.endBreakdown();
        }
        if (in.p != m.length) {
            throw new Unreadable((m.length - in.p) + " bytes after the record");
        }
    }

    private static boolean isHeader(byte[] m, long start, byte[] header) {
        return m.length >= header.length
                && (long) LITTLE_ENDIAN_LONG.get(m, 0) == start
                && m[8] == header[8]
                && m[9] == header[9];
    }

    /** The declared columns of a binary summary in a row of {@code width}. */
    GenericRowData decode(byte[] m, int width) throws Unreadable {
        Columns row = new Columns(width);
        read(m, row);
        return row.row;
    }

    /** Where {@link #read} puts a summary's fields (their indexes: the schema's order). */
    interface Fields {
        /** A string field: {@code length} bytes of UTF-8 from {@code from} on. */
        void text(int field, byte[] array, int from, int length);

        /** A long field, or an int one (its value then within an int's range). */
        void integer(int field, long value);

        /** A double field. */
        void real(int field, double value);

        /** A v2 record's breakdown begins: its kinds and top anchors follow (maybe none). */
        void breakdown();

        /**
         * One entry of kinds: its kind ({@link EventBreakdown#kindIndex}, -1 for a name the
         * contract does not know), its name (UTF-8, a range of {@code array}) and figures.
         */
        void kind(int kind, byte[] array, int nameFrom, int nameLength, long anchors,
                double mean, double max);

        /**
         * One top anchor, in the record's order: its id (UTF-8, a range of {@code array};
         * {@code printable}: of printable ASCII only).
         */
        void topAnchor(boolean printable, byte[] array, int idFrom, int idLength,
                long position, double drift);

        /** The breakdown is read. */
        void endBreakdown();
    }

    /** A row of the declared columns, filled by {@link #read}. */
    private final class Columns implements Fields {
        final GenericRowData row;

        Columns(int width) {
            row = new GenericRowData(width);
        }

        @Override
        public void text(int field, byte[] array, int from, int length) {
            // A copy: the format's caller may reuse the record's array.
            set(field, StringData.fromBytes(Arrays.copyOfRange(array, from, from + length)));
        }

        @Override
        public void integer(int field, long value) {
            // A long field has a BIGINT column; an int field an INT or a BIGINT one.
            set(field, intColumn[field] ? (Object) (int) value : (Object) value);
        }

        @Override
        public void real(int field, double value) {
            set(field, value);
        }

        // The breakdown's columns hold its JSON text, as they would for the JSON form.
        private StringBuilder kinds;
        private StringBuilder top;

        @Override
        public void breakdown() {
            kinds = columnOf[KINDS] < 0 ? null : new StringBuilder("{");
            top = columnOf[TOP_ANCHORS] < 0 ? null : new StringBuilder("[");
        }

        @Override
        public void kind(int kind, byte[] array, int nameFrom, int nameLength, long anchors,
                double mean, double max) {
            if (kinds != null) {
                if (kinds.length() > 1) {
                    kinds.append(',');
                }
                JsonText.string(kinds, JsonText.utf8(array, nameFrom, nameLength));
                kinds.append(":{\"anchor_count\":").append(anchors).append(",\"mean_drift\":");
                JsonText.number(kinds, mean);
                kinds.append(",\"max_drift\":");
                JsonText.number(kinds, max);
                kinds.append('}');
            }
        }

        @Override
        public void topAnchor(boolean printable, byte[] array, int idFrom, int idLength,
                long position, double drift) {
            if (top != null) {
                if (top.length() > 1) {
                    top.append(',');
                }
                top.append("{\"anchor_id\":");
                JsonText.string(top, JsonText.utf8(array, idFrom, idLength));
                top.append(",\"position\":").append(position).append(",\"drift_score\":");
                JsonText.number(top, drift);
                top.append('}');
            }
        }

        @Override
        public void endBreakdown() {
            if (kinds != null) {
                set(KINDS, StringData.fromString(kinds.append('}').toString()));
            }
            if (top != null) {
                set(TOP_ANCHORS, StringData.fromString(top.append(']').toString()));
            }
        }

        private void set(int field, Object value) {
            int column = columnOf[field];
            if (column >= 0) {
                row.setField(column, value);
            }
        }
    }

    /** What a dead letter keeps of an unreadable binary record: the problem, the bytes. */
    static String payloadText(byte[] m, Unreadable problem) {
        return "binary snapshot-summary unreadable: " + problem.getMessage()
                + "; the record in base64: " + Base64.getEncoder().encodeToString(m);
    }

    /** A binary record that is not a whole snapshot-summary (v2 or v1). */
    static final class Unreadable extends Exception {
        private static final long serialVersionUID = 1L;

        Unreadable(String problem) {
            super(problem);
        }
    }

    /** Avro's binary encoding, read from a position on. */
    private static final class Reader {
        private final byte[] m;
        int p;

        Reader(byte[] m, int p) {
            this.m = m;
            this.p = p;
        }

        /** A zig-zag varint of at most ten bytes that fits a long. */
        long varlong() throws Unreadable {
            long raw = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (p >= m.length) {
                    throw new Unreadable("the record ends inside a number");
                }
                byte b = m[p++];
                raw |= (long) (b & 0x7F) << shift;
                if (b >= 0) {
                    if (shift == 63 && (b & 0x7E) != 0) {
                        throw new Unreadable("a number wider than 64 bits");
                    }
                    return (raw >>> 1) ^ -(raw & 1);
                }
            }
            throw new Unreadable("a number wider than 64 bits");
        }

        int varint() throws Unreadable {
            long value = varlong();
            if (value != (int) value) {
                throw new Unreadable("an int out of its 32 bits: " + value);
            }
            return (int) value;
        }

        /** A length-prefixed string, checked for UTF-8, as field {@code field} of out. */
        void string(int field, Fields out) throws Unreadable {
            int start = utf8();
            out.text(field, m, start, p - start);
        }

        /** A length-prefixed string, checked for UTF-8: where it starts (p: its end). */
        int utf8() throws Unreadable {
            int start = bytes();
            if (!isAscii(start, p)) {
                checkUtf8(start, p);
            }
            return start;
        }

        /** A length-prefixed string, unchecked: where it starts (p: its end). */
        int bytes() throws Unreadable {
            long length = varlong();
            if (length < 0 || length > m.length - p) {
                throw new Unreadable("a string of " + length + " bytes where "
                        + (m.length - p) + " remain");
            }
            int start = p;
            p += (int) length;
            return start;
        }

        /** A ["null", T] union's branch: whether a value follows. */
        boolean branch(int field) throws Unreadable {
            long branch = varlong();
            if (branch != 0 && branch != 1) {
                throw new Unreadable(FIELDS[field] + ": no union branch " + branch);
            }
            return branch == 1;
        }

        /**
         * The item count of a map's or an array's next block (0: the end), its byte size
         * skipped when the writer gave one; a count the rest of the record cannot hold is
         * refused before anything is read.
         */
        long blockCount(String field) throws Unreadable {
            long count = varlong();
            if (count < 0) {
                if (count == Long.MIN_VALUE) {
                    throw new Unreadable(field + ": a block of " + count + " items");
                }
                count = -count;
                varlong();
            }
            if (count > (m.length - p) / MIN_ENTRY_BYTES) {
                throw new Unreadable(field + ": a block of " + count + " items where "
                        + (m.length - p) + " bytes remain");
            }
            return count;
        }

        /** Whether no byte has its high bit set: eight at a time, then the rest. */
        private boolean isAscii(int start, int end) {
            // The high bits OR-ed together and tested once: almost every string is ASCII.
            long bits = 0;
            int i = start;
            for (; i + 8 <= end; i += 8) {
                bits |= (long) LITTLE_ENDIAN_LONG.get(m, i);
            }
            for (; i < end; i++) {
                bits |= m[i];
            }
            return (bits & 0x8080808080808080L) == 0;
        }

        void checkUtf8(int start, int end) throws Unreadable {
            try {
                StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(m, start, end - start));
            } catch (CharacterCodingException e) {
                throw new Unreadable("a string that is not UTF-8");
            }
        }

        double doubleValue() throws Unreadable {
            if (m.length - p < 8) {
                throw new Unreadable("the record ends inside a number");
            }
            double value = Double.longBitsToDouble((long) LITTLE_ENDIAN_LONG.get(m, p));
            p += 8;
            return value;
        }
    }
}
