package dev.anchorwatch.flink;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;

import static dev.anchorwatch.flink.JsonSyntax.NULL;
import static dev.anchorwatch.flink.JsonSyntax.literal;
import static dev.anchorwatch.flink.JsonSyntax.numberEnd;
import static dev.anchorwatch.flink.JsonSyntax.plainStringEnd;
import static dev.anchorwatch.flink.JsonSyntax.skipJson;
import static dev.anchorwatch.flink.JsonSyntax.skipValue;
import static dev.anchorwatch.flink.JsonSyntax.ws;

import ch.randelshofer.fastdoubleparser.JsonDoubleParser;
import java.util.Arrays;
import java.util.List;
import java.util.Set;

import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

/**
 * Decodes the top-level fields a table declares straight from a record's UTF-8 bytes and
 * checks the rest (the snapshot's {@code anchors} array above all) for well-formed JSON
 * without building tokens, field names or numbers out of it.
 *
 * <p>It answers only when it is sure to give what Flink's Jackson decoder would: a strict
 * RFC 8259 object (valid UTF-8, no control characters in strings, within Jackson's limits),
 * each declared field at most once, each declared value of the plain kind for its column
 * (a string without escapes for STRING, an integer literal that fits for INT and BIGINT, a
 * number for DOUBLE, or null). Anything else, malformed or merely unusual, returns null and
 * the caller asks Jackson, so the rare records keep exactly today's outcome.
 *
 * <p>A STRING column named as a JSON column (a snapshot's {@code kinds} and {@code
 * top_anchors}) takes an object or array as its text: here the value's own bytes, when no
 * string inside it has an escape; Jackson gives the same value re-written compactly (its
 * tree's {@code toString()}, JsonParserToRowDataConverters#convertToString in flink-json
 * 2.2.1). The two texts may differ in whitespace and number spelling, not in the JSON value
 * they hold, which is what their one reader ({@link BreakdownParser}) reads.
 */
final class TopLevelFieldScanner implements Serializable {

    private static final long serialVersionUID = 1L;

    enum Kind {
        STRING,
        /** A STRING column that takes an object or array as its JSON text. */
        JSON,
        INT,
        BIGINT,
        DOUBLE
    }

    /** Returned by the scanning methods for input the scanner will not vouch for. */
    static final int UNSURE = JsonSyntax.UNSURE;

    private final byte[][] names;
    private final Kind[] kinds;

    /** Per name length, the fields whose name has it. */
    private final int[][] byLength;

    private TopLevelFieldScanner(byte[][] names, Kind[] kinds) {
        this.names = names;
        this.kinds = kinds;
        int longest = 0;
        for (byte[] name : names) {
            longest = Math.max(longest, name.length);
        }
        byLength = new int[longest + 1][];
        Arrays.fill(byLength, NONE);
        for (int i = 0; i < names.length; i++) {
            int[] same = byLength[names[i].length];
            same = Arrays.copyOf(same, same.length + 1);
            same[same.length - 1] = i;
            byLength[names[i].length] = same;
        }
    }

    /** A scanner for {@code rowType}, or null when a column's type is not one it decodes. */
    static TopLevelFieldScanner forRowType(RowType rowType) {
        return forRowType(rowType, Set.of());
    }

    /**
     * A scanner for {@code rowType} whose STRING columns named in {@code jsonColumns} take
     * objects and arrays as their text; null when a column's type is not one it decodes.
     */
    static TopLevelFieldScanner forRowType(RowType rowType, Set<String> jsonColumns) {
        List<RowType.RowField> fields = rowType.getFields();
        if (fields.size() > 64) {
            return null;
        }
        byte[][] names = new byte[fields.size()][];
        Kind[] kinds = new Kind[fields.size()];
        for (int i = 0; i < fields.size(); i++) {
            names[i] = fields.get(i).getName().getBytes(StandardCharsets.UTF_8);
            kinds[i] = kindOf(fields.get(i).getType());
            if (kinds[i] == null) {
                return null;
            }
            if (kinds[i] == Kind.STRING && jsonColumns.contains(fields.get(i).getName())) {
                kinds[i] = Kind.JSON;
            }
        }
        return new TopLevelFieldScanner(names, kinds);
    }

    private static Kind kindOf(LogicalType type) {
        switch (type.getTypeRoot()) {
            case CHAR:
            case VARCHAR:
                return Kind.STRING;
            case INTEGER:
                return Kind.INT;
            case BIGINT:
                return Kind.BIGINT;
            case DOUBLE:
                return Kind.DOUBLE;
            default:
                return null;
        }
    }

    int arity() {
        return names.length;
    }

    /**
     * Where {@link #decode(byte[], Columns)} puts the declared fields' values (field: the
     * column's index); a NULL value puts nothing.
     */
    interface Columns {
        /** A plain string's UTF-8, {@code m[from, to)}. */
        void text(int field, byte[] m, int from, int to);

        void integer(int field, long value);

        void real(int field, double value);

        /**
         * A JSON column's object or array at {@code p} (up to {@code n}): the position after
         * it, or {@link #UNSURE} for Jackson. {@link #skipJson} is what the row does.
         */
        int json(int field, byte[] m, int p, int n);
    }

    /**
     * The declared fields of {@code m} in a row of {@code width} (at least the declared
     * count; extra positions stay NULL), or null when the caller must ask Jackson.
     */
    GenericRowData decode(byte[] m, int width) {
        RowColumns row = new RowColumns(width);
        return decode(m, row) ? row.row : null;
    }

    /**
     * The declared fields of {@code m} into {@code out}; false when the caller must ask
     * Jackson (then {@code out} may hold some fields: discard it).
     */
    boolean decode(byte[] m, Columns out) {
        if (m == null) {
            return false;
        }
        final int n = m.length;
        int p = ws(m, 0, n);
        if (p >= n || m[p] != '{') {
            return false;
        }
        long seen = 0;
        p = ws(m, p + 1, n);
        if (p < n && m[p] == '}') {
            return true;
        }
        while (true) {
            if (p >= n || m[p] != '"') {
                return false;
            }
            int keyStart = p + 1;
            int keyEnd = plainStringEnd(m, keyStart, n);
            if (keyEnd < 0) {
                // Escapes or other bytes in the name: it might spell a declared one.
                return false;
            }
            p = ws(m, keyEnd + 1, n);
            if (p >= n || m[p] != ':') {
                return false;
            }
            p = ws(m, p + 1, n);
            if (p >= n) {
                return false;
            }
            int field = fieldIndex(m, keyStart, keyEnd);
            if (field < 0) {
                p = skipValue(m, p, n, 1);
            } else {
                long bit = 1L << field;
                if ((seen & bit) != 0) {
                    // Jackson keeps the last copy and then stops counting: leave it to it.
                    return false;
                }
                seen |= bit;
                p = decodeValue(m, p, n, field, out);
            }
            if (p < 0) {
                return false;
            }
            p = ws(m, p, n);
            if (p >= n) {
                return false;
            }
            if (m[p] == ',') {
                p = ws(m, p + 1, n);
            } else if (m[p] == '}') {
                // Like Jackson, nothing after the object's end is read.
                return true;
            } else {
                return false;
            }
        }
    }

    /** The columns as a row, strings copied (the format's caller may reuse its array). */
    private final class RowColumns implements Columns {
        final GenericRowData row;

        RowColumns(int width) {
            row = new GenericRowData(width);
        }

        @Override
        public void text(int field, byte[] m, int from, int to) {
            row.setField(field, StringData.fromBytes(Arrays.copyOfRange(m, from, to)));
        }

        @Override
        public void integer(int field, long value) {
            row.setField(field, kinds[field] == Kind.INT ? (Object) (int) value : value);
        }

        @Override
        public void real(int field, double value) {
            row.setField(field, value);
        }

        @Override
        public int json(int field, byte[] m, int p, int n) {
            int end = skipJson(m, p, n);
            if (end >= 0) {
                text(field, m, p, end);
            }
            return end;
        }
    }

    private int fieldIndex(byte[] m, int start, int end) {
        int len = end - start;
        // Names of this length only (most lengths have one or none).
        int[] candidates = len < byLength.length ? byLength[len] : NONE;
        for (int i : candidates) {
            byte[] name = names[i];
            if (Arrays.equals(m, start, end, name, 0, len)) {
                return i;
            }
        }
        return -1;
    }

    private static final int[] NONE = {};

    /** Decodes the value at {@code p} into {@code out}; returns the position after it. */
    private int decodeValue(byte[] m, int p, int n, int field, Columns out) {
        byte c = m[p];
        if (c == 'n') {
            return literal(m, p, n, NULL);
        }
        Kind kind = kinds[field];
        if (kind == Kind.JSON && (c == '{' || c == '[')) {
            return out.json(field, m, p, n);
        }
        switch (kind) {
            case JSON:
            case STRING:
                {
                    // A JSON column's plain string is its text too, as for Jackson.
                    if (c != '"') {
                        return UNSURE;
                    }
                    int end = plainStringEnd(m, p + 1, n);
                    if (end < 0) {
                        return UNSURE;
                    }
                    out.text(field, m, p + 1, end);
                    return end + 1;
                }
            case INT:
            case BIGINT:
                {
                    int end = numberEnd(m, p, n);
                    int digits = end - p - (c == '-' ? 1 : 0);
                    if (end < 0 || digits > (kind == Kind.INT ? 9 : 18)) {
                        return UNSURE;
                    }
                    long value = 0;
                    for (int i = c == '-' ? p + 1 : p; i < end; i++) {
                        int d = m[i] - '0';
                        if (d < 0 || d > 9) {
                            // A fraction or an exponent: Jackson's coercion decides.
                            return UNSURE;
                        }
                        value = value * 10 + d;
                    }
                    if (c == '-') {
                        value = -value;
                    }
                    out.integer(field, value);
                    return end;
                }
            case DOUBLE:
                {
                    int end = numberEnd(m, p, n);
                    if (end < 0) {
                        return UNSURE;
                    }
                    // What Jackson does too: a correctly rounded parse of the literal (the
                    // same double as Double.parseDouble, without building a String or its
                    // big-number slow path for 17-digit literals).
                    out.real(field, JsonDoubleParser.parseDouble(m, p, end - p));
                    return end;
                }
            default:
                return UNSURE;
        }
    }

}
