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

    private static final VarHandle LITTLE_ENDIAN_LONG =
            MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    /** Per schema field, the column it decodes into, or -1 when the table has none. */
    private final int[] columnOf;

    /** Per schema field, whether its column is an INT (else a BIGINT for an int field). */
    private final boolean[] intColumn;

    /**
     * Whether strings may point into the record's own bytes instead of copies: only where
     * the caller owns each record's array and never reuses it (a Kafka record's value).
     */
    private final boolean wrap;

    private BinarySummaryDecoder(int[] columnOf, boolean[] intColumn, boolean wrap) {
        this.columnOf = columnOf;
        this.intColumn = intColumn;
        this.wrap = wrap;
    }

    /** This decoder with strings that point into each record's own array. */
    BinarySummaryDecoder wrapping() {
        return new BinarySummaryDecoder(columnOf, intColumn, true);
    }

    /**
     * A decoder into {@code rowType}'s columns, or null when a column named as a summary
     * field has a type the field cannot fill (a string column for a string field, BIGINT
     * for the long, INT or BIGINT for an int, DOUBLE for a double).
     */
    static BinarySummaryDecoder forRowType(RowType rowType) {
        int[] columnOf = new int[FIELDS.length];
        boolean[] intColumn = new boolean[FIELDS.length];
        Arrays.fill(columnOf, -1);
        List<String> names = rowType.getFieldNames();
        for (int f = 0; f < FIELDS.length; f++) {
            int column = names.indexOf(FIELDS[f]);
            if (column < 0) {
                continue;
            }
            LogicalTypeRoot type = rowType.getTypeAt(column).getTypeRoot();
            boolean fits;
            switch (f) {
                case 1:
                    fits = type == LogicalTypeRoot.BIGINT;
                    break;
                case 4:
                case 9:
                    fits = type == LogicalTypeRoot.INTEGER || type == LogicalTypeRoot.BIGINT;
                    break;
                case 6:
                case 7:
                case 8:
                    fits = type == LogicalTypeRoot.DOUBLE;
                    break;
                default:
                    fits = type == LogicalTypeRoot.VARCHAR || type == LogicalTypeRoot.CHAR;
            }
            if (!fits) {
                return null;
            }
            columnOf[f] = column;
            intColumn[f] = type == LogicalTypeRoot.INTEGER;
        }
        return new BinarySummaryDecoder(columnOf, intColumn, false);
    }

    /** Whether the record claims to be a binary summary (starts with the marker). */
    static boolean isBinary(byte[] m) {
        return m != null && m.length >= 2 && m[0] == HEADER[0] && m[1] == HEADER[1];
    }

    /** The declared columns of a binary summary in a row of {@code width}. */
    GenericRowData decode(byte[] m, int width) throws Unreadable {
        if (m.length < HEADER.length
                || !Arrays.equals(m, 0, HEADER.length, HEADER, 0, HEADER.length)) {
            throw new Unreadable("another schema (the fingerprint after the marker is not"
                    + " snapshot-summary.v1's)");
        }
        GenericRowData row = new GenericRowData(width);
        Reader in = new Reader(m, HEADER.length, wrap);
        set(row, 0, in.string());
        set(row, 1, in.varlong());
        set(row, 2, in.string());
        set(row, 3, in.string());
        setInt(row, 4, in.varint());
        long branch = in.varlong();
        if (branch == 1) {
            set(row, 5, in.string());
        } else if (branch != 0) {
            throw new Unreadable("source: no union branch " + branch);
        }
        set(row, 6, in.doubleValue());
        set(row, 7, in.doubleValue());
        set(row, 8, in.doubleValue());
        setInt(row, 9, in.varint());
        if (in.p != m.length) {
            throw new Unreadable((m.length - in.p) + " bytes after the record");
        }
        return row;
    }

    private void set(GenericRowData row, int field, Object value) {
        int column = columnOf[field];
        if (column >= 0) {
            row.setField(column, value);
        }
    }

    private void setInt(GenericRowData row, int field, int value) {
        int column = columnOf[field];
        if (column >= 0) {
            row.setField(column, intColumn[field] ? (Object) value : (Object) (long) value);
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
        private final boolean wrap;
        int p;

        Reader(byte[] m, int p, boolean wrap) {
            this.m = m;
            this.p = p;
            this.wrap = wrap;
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

        StringData string() throws Unreadable {
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
            return wrap
                    ? StringData.fromBytes(m, start, end - start)
                    : StringData.fromBytes(Arrays.copyOfRange(m, start, end));
        }

        /** Whether no byte has its high bit set: eight at a time, then the rest. */
        private boolean isAscii(int start, int end) {
            int i = start;
            for (; i + 8 <= end; i += 8) {
                if (((long) LITTLE_ENDIAN_LONG.get(m, i) & 0x8080808080808080L) != 0) {
                    return false;
                }
            }
            for (; i < end; i++) {
                if (m[i] < 0) {
                    return false;
                }
            }
            return true;
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
