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
 * single-object encoding (anchorwatch/contracts/schemas/snapshot-summary.v1.avsc, written
 * by anchorwatch/contracts/avro.py), field by field in the schema's order, into the columns
 * a table declares under the same names. No text is tokenised: strings are length-prefixed,
 * numbers are varints and little-endian doubles.
 *
 * <p>A record that starts with the single-object marker is this decoder's, whole: a wrong
 * fingerprint (another schema), a truncated or overlong record, a varint out of range, an
 * unknown union branch or a string that is not UTF-8 is {@link Unreadable}, which the
 * caller turns into a payload row and so a dead letter that names the problem. The
 * contract's rules on the values (lengths, ranges, statuses) are the job's checks, as for
 * JSON.
 */
final class BinarySummaryDecoder implements Serializable {

    private static final long serialVersionUID = 1L;

    /** The single-object marker, then the schema's CRC-64-AVRO fingerprint, little-endian. */
    static final byte[] HEADER = {
        (byte) 0xC3, 0x01,
        (byte) 0xE5, (byte) 0xA6, (byte) 0xBB, 0x22, 0x26, (byte) 0xCF, 0x1A, 0x64
    };

    /** The schema's fields in order (the binary form has no names: the order is the format). */
    private static final String[] FIELDS = {
        "event_id", "event_time_ms", "doc_type", "snapshot_status", "anchor_count", "source",
        "mean_drift", "max_drift", "max_kl_divergence", "resample_count"
    };

    static final int EVENT_ID = 0;
    static final int EVENT_TIME_MS = 1;
    static final int DOC_TYPE = 2;
    static final int SNAPSHOT_STATUS = 3;
    static final int ANCHOR_COUNT = 4;
    static final int SOURCE = 5;
    static final int MEAN_DRIFT = 6;
    static final int MAX_DRIFT = 7;
    static final int MAX_KL_DIVERGENCE = 8;
    static final int RESAMPLE_COUNT = 9;

    private static final VarHandle LITTLE_ENDIAN_LONG =
            MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    /** The header's first eight bytes as one number, to compare once per record. */
    private static final long HEADER_START = (long) LITTLE_ENDIAN_LONG.get(HEADER, 0);

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
                    fits = type == LogicalTypeRoot.INTEGER || type == LogicalTypeRoot.BIGINT;
                    break;
                case MEAN_DRIFT:
                case MAX_DRIFT:
                case MAX_KL_DIVERGENCE:
                    fits = type == LogicalTypeRoot.DOUBLE;
                    break;
                default:
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
     * Reads a binary summary's fields into {@code out}, in the schema's order (the source
     * only when it is not null). Strings are checked for UTF-8 and given as ranges of
     * {@code m}. On {@link Unreadable}, {@code out} may hold some fields: discard it.
     */
    static void read(byte[] m, Fields out) throws Unreadable {
        if (m.length < HEADER.length
                || (long) LITTLE_ENDIAN_LONG.get(m, 0) != HEADER_START
                || m[8] != HEADER[8]
                || m[9] != HEADER[9]) {
            throw new Unreadable("another schema (the fingerprint after the marker is not"
                    + " snapshot-summary.v1's)");
        }
        Reader in = new Reader(m, HEADER.length);
        in.string(EVENT_ID, out);
        out.integer(EVENT_TIME_MS, in.varlong());
        in.string(DOC_TYPE, out);
        in.string(SNAPSHOT_STATUS, out);
        out.integer(ANCHOR_COUNT, in.varint());
        long branch = in.varlong();
        if (branch == 1) {
            in.string(SOURCE, out);
        } else if (branch != 0) {
            throw new Unreadable("source: no union branch " + branch);
        }
        out.real(MEAN_DRIFT, in.doubleValue());
        out.real(MAX_DRIFT, in.doubleValue());
        out.real(MAX_KL_DIVERGENCE, in.doubleValue());
        out.integer(RESAMPLE_COUNT, in.varint());
        if (in.p != m.length) {
            throw new Unreadable((m.length - in.p) + " bytes after the record");
        }
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

    /** A binary record that is not a whole snapshot-summary.v1. */
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
            long length = varlong();
            if (length < 0 || length > m.length - p) {
                throw new Unreadable("a string of " + length + " bytes where "
                        + (m.length - p) + " remain");
            }
            int start = p;
            int end = p + (int) length;
            p = end;
            if (!isAscii(start, end)) {
                checkUtf8(start, end);
            }
            out.text(field, m, start, end - start);
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

        private void checkUtf8(int start, int end) throws Unreadable {
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
