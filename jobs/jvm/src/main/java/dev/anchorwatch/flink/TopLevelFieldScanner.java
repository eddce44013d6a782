package dev.anchorwatch.flink;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;

import ch.randelshofer.fastdoubleparser.JsonDoubleParser;
import java.util.Arrays;
import java.util.List;

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
 */
final class TopLevelFieldScanner implements Serializable {

    private static final long serialVersionUID = 1L;

    enum Kind {
        STRING,
        INT,
        BIGINT,
        DOUBLE
    }

    /** Returned by the scanning methods for input the scanner will not vouch for. */
    private static final int UNSURE = -1;

    // Well below Jackson's own limits (nesting 1000, numbers 1000 characters): past these
    // Jackson might refuse a document the scanner would accept.
    private static final int MAX_DEPTH = 256;
    private static final int MAX_NUMBER_CHARS = 64;

    /** Bytes that may follow one another inside a string without a closer look. */
    private static final boolean[] PLAIN = new boolean[256];

    static {
        for (int b = 0x20; b < 0x80; b++) {
            PLAIN[b] = b != '"' && b != '\\';
        }
    }

    private final byte[][] names;
    private final Kind[] kinds;

    private TopLevelFieldScanner(byte[][] names, Kind[] kinds) {
        this.names = names;
        this.kinds = kinds;
    }

    /** A scanner for {@code rowType}, or null when a column's type is not one it decodes. */
    static TopLevelFieldScanner forRowType(RowType rowType) {
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
     * The declared fields of {@code m} in a row of {@code width} (at least the declared
     * count; extra positions stay NULL), or null when the caller must ask Jackson.
     */
    GenericRowData decode(byte[] m, int width) {
        if (m == null) {
            return null;
        }
        final int n = m.length;
        int p = ws(m, 0, n);
        if (p >= n || m[p] != '{') {
            return null;
        }
        GenericRowData row = new GenericRowData(width);
        long seen = 0;
        p = ws(m, p + 1, n);
        if (p < n && m[p] == '}') {
            return row;
        }
        while (true) {
            if (p >= n || m[p] != '"') {
                return null;
            }
            int keyStart = p + 1;
            int keyEnd = plainStringEnd(m, keyStart, n);
            if (keyEnd < 0) {
                // Escapes or other bytes in the name: it might spell a declared one.
                return null;
            }
            p = ws(m, keyEnd + 1, n);
            if (p >= n || m[p] != ':') {
                return null;
            }
            p = ws(m, p + 1, n);
            if (p >= n) {
                return null;
            }
            int field = fieldIndex(m, keyStart, keyEnd);
            if (field < 0) {
                p = skipValue(m, p, n, 1);
            } else {
                long bit = 1L << field;
                if ((seen & bit) != 0) {
                    // Jackson keeps the last copy and then stops counting: leave it to it.
                    return null;
                }
                seen |= bit;
                p = decodeValue(m, p, n, field, row);
            }
            if (p < 0) {
                return null;
            }
            p = ws(m, p, n);
            if (p >= n) {
                return null;
            }
            if (m[p] == ',') {
                p = ws(m, p + 1, n);
            } else if (m[p] == '}') {
                // Like Jackson, nothing after the object's end is read.
                return row;
            } else {
                return null;
            }
        }
    }

    private int fieldIndex(byte[] m, int start, int end) {
        int len = end - start;
        for (int i = 0; i < names.length; i++) {
            byte[] name = names[i];
            if (name.length == len
                    && Arrays.equals(m, start, end, name, 0, len)) {
                return i;
            }
        }
        return -1;
    }

    /** Decodes the value at {@code p} into {@code row}; returns the position after it. */
    private int decodeValue(byte[] m, int p, int n, int field, GenericRowData row) {
        byte c = m[p];
        if (c == 'n') {
            return literal(m, p, n, NULL);
        }
        switch (kinds[field]) {
            case STRING:
                {
                    if (c != '"') {
                        return UNSURE;
                    }
                    int end = plainStringEnd(m, p + 1, n);
                    if (end < 0) {
                        return UNSURE;
                    }
                    row.setField(
                            field, StringData.fromBytes(Arrays.copyOfRange(m, p + 1, end)));
                    return end + 1;
                }
            case INT:
            case BIGINT:
                {
                    int end = numberEnd(m, p, n);
                    int digits = end - p - (c == '-' ? 1 : 0);
                    if (end < 0 || digits > (kinds[field] == Kind.INT ? 9 : 18)) {
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
                    row.setField(field, kinds[field] == Kind.INT ? (Object) (int) value : value);
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
                    row.setField(field, JsonDoubleParser.parseDouble(m, p, end - p));
                    return end;
                }
            default:
                return UNSURE;
        }
    }

    private static int ws(byte[] m, int p, int n) {
        while (p < n) {
            byte c = m[p];
            if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
                break;
            }
            p++;
        }
        return p;
    }

    /** Checks any JSON value at {@code p}; returns the position after it. */
    private static int skipValue(byte[] m, int p, int n, int depth) {
        switch (m[p]) {
            case '"':
                return stringEnd(m, p + 1, n);
            case '{':
                return skipObject(m, p, n, depth + 1);
            case '[':
                return skipArray(m, p, n, depth + 1);
            case 't':
                return literal(m, p, n, TRUE);
            case 'f':
                return literal(m, p, n, FALSE);
            case 'n':
                return literal(m, p, n, NULL);
            default:
                return numberEnd(m, p, n);
        }
    }

    private static int skipObject(byte[] m, int p, int n, int depth) {
        if (depth > MAX_DEPTH) {
            return UNSURE;
        }
        p = ws(m, p + 1, n);
        if (p < n && m[p] == '}') {
            return p + 1;
        }
        while (true) {
            if (p >= n || m[p] != '"') {
                return UNSURE;
            }
            p = stringEnd(m, p + 1, n);
            if (p < 0) {
                return UNSURE;
            }
            p = ws(m, p, n);
            if (p >= n || m[p] != ':') {
                return UNSURE;
            }
            p = ws(m, p + 1, n);
            if (p >= n) {
                return UNSURE;
            }
            p = skipValue(m, p, n, depth);
            if (p < 0) {
                return UNSURE;
            }
            p = ws(m, p, n);
            if (p >= n) {
                return UNSURE;
            }
            if (m[p] == ',') {
                p = ws(m, p + 1, n);
            } else if (m[p] == '}') {
                return p + 1;
            } else {
                return UNSURE;
            }
        }
    }

    private static int skipArray(byte[] m, int p, int n, int depth) {
        if (depth > MAX_DEPTH) {
            return UNSURE;
        }
        p = ws(m, p + 1, n);
        if (p < n && m[p] == ']') {
            return p + 1;
        }
        while (true) {
            if (p >= n) {
                return UNSURE;
            }
            p = skipValue(m, p, n, depth);
            if (p < 0) {
                return UNSURE;
            }
            p = ws(m, p, n);
            if (p >= n) {
                return UNSURE;
            }
            if (m[p] == ',') {
                p = ws(m, p + 1, n);
            } else if (m[p] == ']') {
                return p + 1;
            } else {
                return UNSURE;
            }
        }
    }

    /**
     * End (the closing quote's position) of a string starting at {@code p} that holds only
     * printable ASCII without escapes; UNSURE for anything else.
     */
    private static int plainStringEnd(byte[] m, int p, int n) {
        while (p < n && PLAIN[m[p] & 0xFF]) {
            p++;
        }
        return p < n && m[p] == '"' ? p : UNSURE;
    }

    /** Position after the closing quote of a string whose content starts at {@code p}. */
    private static int stringEnd(byte[] m, int p, int n) {
        while (true) {
                while (p < n && PLAIN[m[p] & 0xFF]) {
                p++;
            }
            if (p >= n) {
                return UNSURE;
            }
            int c = m[p] & 0xFF;
            if (c == '"') {
                return p + 1;
            } else if (c == '\\') {
                p = escapeEnd(m, p + 1, n);
            } else if (c >= 0x80) {
                p = utf8End(m, p, n, c);
            } else {
                // A raw control character: Flink lets Jackson accept it; not ours to judge.
                return UNSURE;
            }
            if (p < 0) {
                return UNSURE;
            }
        }
    }

    private static int escapeEnd(byte[] m, int p, int n) {
        if (p >= n) {
            return UNSURE;
        }
        switch (m[p]) {
            case '"':
            case '\\':
            case '/':
            case 'b':
            case 'f':
            case 'n':
            case 'r':
            case 't':
                return p + 1;
            case 'u':
                if (p + 4 >= n) {
                    return UNSURE;
                }
                for (int i = p + 1; i <= p + 4; i++) {
                    if (Character.digit(m[i], 16) < 0) {
                        return UNSURE;
                    }
                }
                return p + 5;
            default:
                return UNSURE;
        }
    }

    /** Position after a well-formed UTF-8 sequence (no overlong forms, no surrogates). */
    private static int utf8End(byte[] m, int p, int n, int c) {
        int len;
        int min;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            min = 0x10000;
        } else {
            return UNSURE;
        }
        if (p + len > n) {
            return UNSURE;
        }
        int cp = c & (0xFF >> (len + 1));
        for (int i = 1; i < len; i++) {
            int b = m[p + i] & 0xFF;
            if ((b & 0xC0) != 0x80) {
                return UNSURE;
            }
            cp = (cp << 6) | (b & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return UNSURE;
        }
        return p + len;
    }

    /** Position after a JSON number at {@code p}: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
    private static int numberEnd(byte[] m, int p, int n) {
        int start = p;
        if (p < n && m[p] == '-') {
            p++;
        }
        if (p >= n) {
            return UNSURE;
        }
        if (m[p] == '0') {
            p++;
        } else if (m[p] >= '1' && m[p] <= '9') {
            p = digitsEnd(m, p + 1, n);
        } else {
            return UNSURE;
        }
        if (p < n && m[p] == '.') {
            int q = digitsEnd(m, p + 1, n);
            if (q == p + 1) {
                return UNSURE;
            }
            p = q;
        }
        if (p < n && (m[p] == 'e' || m[p] == 'E')) {
            p++;
            if (p < n && (m[p] == '+' || m[p] == '-')) {
                p++;
            }
            int q = digitsEnd(m, p, n);
            if (q == p) {
                return UNSURE;
            }
            p = q;
        }
        // Jackson reads a number up to a separator: "1x" or "01" is its error, not a number.
        if (p < n && !endsNumber(m[p])) {
            return UNSURE;
        }
        return p - start > MAX_NUMBER_CHARS ? UNSURE : p;
    }

    private static boolean endsNumber(byte c) {
        return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r'
                || c == '\t';
    }

    private static int digitsEnd(byte[] m, int p, int n) {
        while (p < n && m[p] >= '0' && m[p] <= '9') {
            p++;
        }
        return p;
    }

    private static final byte[] TRUE = {'t', 'r', 'u', 'e'};
    private static final byte[] FALSE = {'f', 'a', 'l', 's', 'e'};
    private static final byte[] NULL = {'n', 'u', 'l', 'l'};

    private static int literal(byte[] m, int p, int n, byte[] word) {
        int end = p + word.length;
        if (end > n || !Arrays.equals(m, p, end, word, 0, word.length)) {
            return UNSURE;
        }
        // "nullx" is Jackson's error too, but let it say so.
        if (end < n && !endsNumber(m[end])) {
            return UNSURE;
        }
        return end;
    }
}
