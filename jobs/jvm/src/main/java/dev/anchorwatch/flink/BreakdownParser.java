package dev.anchorwatch.flink;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

import ch.randelshofer.fastdoubleparser.JsonDoubleParser;

/**
 * Reads a snapshot's {@code kinds} and {@code top_anchors} from their JSON text (UTF-8) into
 * an {@link EventBreakdown}: the two shapes the contract writes and nothing else.
 *
 * <pre>
 *   kinds:       {"SECTION": {"anchor_count": 3, "mean_drift": 0.5, "max_drift": 0.9}, ...}
 *   top_anchors: [{"anchor_id": "TABLE_001", "position": 10, "drift_score": 0.9}, ...]
 * </pre>
 *
 * <p>The text is either the value's own bytes ({@link TopLevelFieldScanner}, which vouches for
 * them only without escapes) or Flink's JSON decoder's re-writing of it (the node's compact
 * {@code toString()}): any whitespace, escapes, number spellings and key order. Both read
 * alike: a duplicate key keeps its last value (as Jackson's tree does), a kind's or an
 * anchor's three keys must all be there, and an unknown key, a value of the wrong type, an
 * integer written with a fraction or an exponent, or anything after the value refuses the
 * part ({@link EventBreakdown#refuseKinds}, {@link EventBreakdown#refuseTop}). The contract's
 * value rules are {@link EventBreakdown}'s.
 *
 * <p>Text exactly as the contract writes it (compact, keys in order, plain strings and
 * numbers: every snapshot the connectors write) is read in one pass straight from a
 * record's bytes ({@link #fastKinds}, {@link #fastTop}); any other, by the general reading,
 * to the same result.
 */
final class BreakdownParser {

    private static final byte[] ANCHOR_COUNT = bytes("anchor_count");
    private static final byte[] MEAN_DRIFT = bytes("mean_drift");
    private static final byte[] MAX_DRIFT = bytes("max_drift");
    private static final byte[] ANCHOR_ID = bytes("anchor_id");
    private static final byte[] POSITION = bytes("position");
    private static final byte[] DRIFT_SCORE = bytes("drift_score");

    /** Thrown inside the parser for anything outside the shape; never escapes it. */
    private static final class Refused extends Exception {
        private static final long serialVersionUID = 1L;
        static final Refused INSTANCE = new Refused();

        private Refused() {
            super(null, null, false, false);
        }
    }

    private final byte[] m;
    private int p;
    /** The end of what is being read: the whole text, or one value's range of it. */
    private int end;
    // The last string read: a range of m, or of its unescaped copy.
    private byte[] strArray;
    private int strFrom;
    private int strLength;
    // Per key of the object members() read, its value's range (from, to).
    private final int[] ranges = new int[6];

    private BreakdownParser(byte[] m, int from, int end) {
        this.m = m;
        this.p = from;
        this.end = end;
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    /** The kinds object in {@code m[from, to)} into {@code out}, or refuses the kinds. */
    static void kinds(byte[] m, int from, int to, EventBreakdown out) {
        out.resetKinds();
        try {
            new BreakdownParser(m, from, to).readKinds(out);
        } catch (Refused e) {
            out.refuseKinds();
            out.endKinds();
        }
    }

    /** The top anchors array in {@code m[from, to)} into {@code out}, or refuses them. */
    static void topAnchors(byte[] m, int from, int to, EventBreakdown out) {
        out.resetTop();
        try {
            new BreakdownParser(m, from, to).readTop(out);
        } catch (Refused e) {
            out.refuseTop();
        }
    }

    // The fast paths: the text exactly as contracts.encode (and the ingest's compiled path)
    // writes it, read in one pass; anything else, the general reading above.
    private static final byte[] KIND_OPEN = bytes("\":{\"anchor_count\":");
    private static final byte[] KIND_MEAN = bytes(",\"mean_drift\":");
    private static final byte[] KIND_MAX = bytes(",\"max_drift\":");
    private static final byte[] TOP_OPEN = bytes("{\"anchor_id\":\"");
    private static final byte[] TOP_POSITION = bytes("\",\"position\":");
    private static final byte[] TOP_DRIFT = bytes(",\"drift_score\":");

    /**
     * Kinds at {@code p} written compactly, each kind's keys in the contract's order, every
     * number in JSON's plain form: into {@code out}, returning the position after them; -1
     * for any other text (then nothing is kept: read it with {@link #kinds}).
     */
    static int fastKinds(byte[] m, int p, int n, EventBreakdown out) {
        out.resetKinds();
        if (p >= n || m[p] != '{') {
            return -1;
        }
        p++;
        if (p < n && m[p] == '}') {
            out.endKinds();
            return p + 1;
        }
        while (true) {
            if (p >= n || m[p] != '"') {
                return -1;
            }
            int name = ++p;
            while (p < n && m[p] >= 'A' && m[p] <= 'Z') {
                p++;
            }
            int kind = EventBreakdown.kindIndex(m, name, p - name);
            if (kind < 0 || !at(m, p, n, KIND_OPEN)) {
                return -1;
            }
            p += KIND_OPEN.length;
            int end = digitsEnd(m, p, n);
            if (end < 0) {
                return -1;
            }
            long anchors = digits(m, p, end);
            p = end;
            if (!at(m, p, n, KIND_MEAN)) {
                return -1;
            }
            p += KIND_MEAN.length;
            end = JsonSyntax.numberEnd(m, p, n);
            if (end < 0) {
                return -1;
            }
            double mean = JsonDoubleParser.parseDouble(m, p, end - p);
            p = end;
            if (!at(m, p, n, KIND_MAX)) {
                return -1;
            }
            p += KIND_MAX.length;
            end = JsonSyntax.numberEnd(m, p, n);
            if (end < 0 || end >= n || m[end] != '}') {
                return -1;
            }
            out.kind(kind, anchors, mean, JsonDoubleParser.parseDouble(m, p, end - p));
            p = end + 1;
            if (p < n && m[p] == ',') {
                p++;
            } else if (p < n && m[p] == '}') {
                out.endKinds();
                return p + 1;
            } else {
                return -1;
            }
        }
    }

    /** Top anchors at {@code p} as the contract writes them, as {@link #fastKinds} does. */
    static int fastTop(byte[] m, int p, int n, EventBreakdown out) {
        out.resetTop();
        if (p >= n || m[p] != '[') {
            return -1;
        }
        p++;
        if (p < n && m[p] == ']') {
            return p + 1;
        }
        while (true) {
            if (!at(m, p, n, TOP_OPEN)) {
                return -1;
            }
            int id = p + TOP_OPEN.length;
            p = id;
            // Printable ASCII but the quote and the backslash; anything else: read slowly.
            while (p < n && m[p] >= 0x20 && m[p] < 0x7F && m[p] != '"' && m[p] != '\\') {
                p++;
            }
            int idEnd = p;
            if (!at(m, p, n, TOP_POSITION)) {
                return -1;
            }
            p += TOP_POSITION.length;
            int end = digitsEnd(m, p, n);
            if (end < 0) {
                return -1;
            }
            long position = digits(m, p, end);
            p = end;
            if (!at(m, p, n, TOP_DRIFT)) {
                return -1;
            }
            p += TOP_DRIFT.length;
            end = JsonSyntax.numberEnd(m, p, n);
            if (end < 0 || end >= n || m[end] != '}') {
                return -1;
            }
            out.topAnchorAscii(m, id, idEnd - id, position,
                    JsonDoubleParser.parseDouble(m, p, end - p));
            p = end + 1;
            if (p < n && m[p] == ',') {
                p++;
            } else if (p < n && m[p] == ']') {
                return p + 1;
            } else {
                return -1;
            }
        }
    }

    private static boolean at(byte[] m, int p, int n, byte[] word) {
        return p + word.length <= n
                && java.util.Arrays.equals(m, p, p + word.length, word, 0, word.length);
    }

    /** The end of 1 to 18 digits without a leading zero at p, or -1. */
    private static int digitsEnd(byte[] m, int p, int n) {
        int q = p;
        while (q < n && m[q] >= '0' && m[q] <= '9') {
            q++;
        }
        return q == p || q - p > 18 || (m[p] == '0' && q - p > 1) ? -1 : q;
    }

    private static long digits(byte[] m, int from, int to) {
        long value = 0;
        for (int i = from; i < to; i++) {
            value = value * 10 + (m[i] - '0');
        }
        return value;
    }

    private void readKinds(EventBreakdown out) throws Refused {
        expect('{');
        if (!closes('}')) {
            int outer = end;
            do {
                string();
                int kind = EventBreakdown.kindIndex(strArray, strFrom, strLength);
                if (kind < 0) {
                    throw Refused.INSTANCE;
                }
                expect(':');
                int from = valueStart();
                int to = skip();
                // Each entry on its own: a later one of the same kind replaces it whole.
                try {
                    within(from, to);
                    members(ANCHOR_COUNT, MEAN_DRIFT, MAX_DRIFT);
                    long anchors = integerAt(ranges[0], ranges[1]);
                    double mean = numberAt(ranges[2], ranges[3]);
                    out.kind(kind, anchors, mean, numberAt(ranges[4], ranges[5]));
                } catch (Refused e) {
                    out.brokenKind(kind);
                }
                p = to;
                end = outer;
            } while (next('}'));
        }
        finish();
        out.endKinds();
    }

    private void readTop(EventBreakdown out) throws Refused {
        expect('[');
        if (!closes(']')) {
            do {
                members(ANCHOR_ID, POSITION, DRIFT_SCORE);
                int after = p;
                int outer = end;
                long position = integerAt(ranges[2], ranges[3]);
                double drift = numberAt(ranges[4], ranges[5]);
                within(ranges[0], ranges[1]);
                string();
                finish();
                out.topAnchor(strArray, strFrom, strLength, position, drift);
                p = after;
                end = outer;
            } while (next(']'));
        }
        finish();
    }

    /** Reads on from {@code from}, up to {@code to} only. */
    private void within(int from, int to) {
        p = from;
        end = to;
    }

    /**
     * An object at p with exactly these keys (at most three), each present (a duplicate's
     * last value counts): per key, the range of its value in {@link #ranges}.
     */
    private void members(byte[]... keys) throws Refused {
        java.util.Arrays.fill(ranges, -1);
        expect('{');
        if (!closes('}')) {
            do {
                string();
                int key = 0;
                while (key < keys.length && !isKey(keys[key])) {
                    key++;
                }
                if (key == keys.length) {
                    throw Refused.INSTANCE;
                }
                expect(':');
                ranges[2 * key] = valueStart();
                ranges[2 * key + 1] = skip();
            } while (next('}'));
        }
        for (int i = 0; i < 2 * keys.length; i++) {
            if (ranges[i] < 0) {
                throw Refused.INSTANCE;
            }
        }
    }

    private int valueStart() throws Refused {
        ws();
        if (p >= end) {
            throw Refused.INSTANCE;
        }
        return p;
    }

    /** Past the (well-formed) JSON value at p; returns where it ends. */
    private int skip() throws Refused {
        int to = JsonSyntax.skipValue(m, p, end, 1);
        if (to < 0) {
            throw Refused.INSTANCE;
        }
        p = to;
        return to;
    }

    private long integerAt(int from, int to) throws Refused {
        within(from, to);
        long value = integer();
        finish();
        return value;
    }

    private double numberAt(int from, int to) throws Refused {
        within(from, to);
        double value = number();
        finish();
        return value;
    }

    private boolean isKey(byte[] name) {
        return strLength == name.length
                && java.util.Arrays.equals(strArray, strFrom, strFrom + strLength, name, 0,
                        name.length);
    }

    private void ws() {
        while (p < end && (m[p] == ' ' || m[p] == '\n' || m[p] == '\r' || m[p] == '\t')) {
            p++;
        }
    }

    private void expect(char c) throws Refused {
        ws();
        if (p >= end || m[p] != c) {
            throw Refused.INSTANCE;
        }
        p++;
    }

    /** Whether the container closes right away (empty), consuming the closer if so. */
    private boolean closes(char closer) {
        ws();
        if (p < end && m[p] == closer) {
            p++;
            return true;
        }
        return false;
    }

    /** After a member: true for a comma (another follows), false for the closer. */
    private boolean next(char closer) throws Refused {
        ws();
        if (p < end && m[p] == ',') {
            p++;
            return true;
        }
        if (p < end && m[p] == closer) {
            p++;
            return false;
        }
        throw Refused.INSTANCE;
    }

    private void finish() throws Refused {
        ws();
        if (p != end) {
            throw Refused.INSTANCE;
        }
    }

    /** A string: its UTF-8 in strArray[strFrom, +strLength), unescaped. */
    private void string() throws Refused {
        expect('"');
        int start = p;
        while (p < end && m[p] != '"' && m[p] != '\\') {
            p++;
        }
        if (p < end && m[p] == '"') {
            strArray = m;
            strFrom = start;
            strLength = p - start;
            p++;
            return;
        }
        // Escapes (only a JSON decoder's re-writing has them): unescaped into a copy.
        ByteArrayOutputStream out = new ByteArrayOutputStream(p - start + 16);
        out.write(m, start, p - start);
        while (true) {
            if (p >= end) {
                throw Refused.INSTANCE;
            }
            byte c = m[p++];
            if (c == '"') {
                break;
            }
            if (c != '\\') {
                out.write(c);
                continue;
            }
            if (p >= end) {
                throw Refused.INSTANCE;
            }
            byte e = m[p++];
            switch (e) {
                case '"': case '\\': case '/': out.write(e); break;
                case 'b': out.write('\b'); break;
                case 'f': out.write('\f'); break;
                case 'n': out.write('\n'); break;
                case 'r': out.write('\r'); break;
                case 't': out.write('\t'); break;
                case 'u': unicode(out); break;
                default: throw Refused.INSTANCE;
            }
        }
        strArray = out.toByteArray();
        strFrom = 0;
        strLength = strArray.length;
    }

    /** A \\u escape (a surrogate pair as two), written as UTF-8; a lone surrogate refused. */
    private void unicode(ByteArrayOutputStream out) throws Refused {
        int c = hex4();
        if (c >= 0xD800 && c <= 0xDBFF) {
            if (p + 1 >= end || m[p] != '\\' || m[p + 1] != 'u') {
                throw Refused.INSTANCE;
            }
            p += 2;
            int low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) {
                throw Refused.INSTANCE;
            }
            c = 0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00);
        } else if (c >= 0xDC00 && c <= 0xDFFF) {
            throw Refused.INSTANCE;
        }
        byte[] utf8 = new String(Character.toChars(c)).getBytes(StandardCharsets.UTF_8);
        out.write(utf8, 0, utf8.length);
    }

    private int hex4() throws Refused {
        if (p + 4 > end) {
            throw Refused.INSTANCE;
        }
        int value = 0;
        for (int i = 0; i < 4; i++) {
            int d = Character.digit(m[p++], 16);
            if (d < 0) {
                throw Refused.INSTANCE;
            }
            value = (value << 4) | d;
        }
        return value;
    }

    /** An integer literal (no fraction, no exponent) that fits a long. */
    private long integer() throws Refused {
        ws();
        int start = p;
        boolean negative = p < end && m[p] == '-';
        if (negative) {
            p++;
        }
        int digits = p;
        while (p < end && m[p] >= '0' && m[p] <= '9') {
            p++;
        }
        int n = p - digits;
        if (n == 0 || n > 18 || (n > 1 && m[digits] == '0') || !endsValue()) {
            throw Refused.INSTANCE;
        }
        long value = 0;
        for (int i = digits; i < p; i++) {
            value = value * 10 + (m[i] - '0');
        }
        return m[start] == '-' ? -value : value;
    }

    /** A JSON number, correctly rounded to a double as Jackson and Python read it. */
    private double number() throws Refused {
        ws();
        int start = p;
        if (p < end && m[p] == '-') {
            p++;
        }
        int intStart = p;
        while (p < end && m[p] >= '0' && m[p] <= '9') {
            p++;
        }
        if (p == intStart || (p - intStart > 1 && m[intStart] == '0')) {
            throw Refused.INSTANCE;
        }
        if (p < end && m[p] == '.') {
            int q = ++p;
            while (p < end && m[p] >= '0' && m[p] <= '9') {
                p++;
            }
            if (p == q) {
                throw Refused.INSTANCE;
            }
        }
        if (p < end && (m[p] == 'e' || m[p] == 'E')) {
            p++;
            if (p < end && (m[p] == '+' || m[p] == '-')) {
                p++;
            }
            int q = p;
            while (p < end && m[p] >= '0' && m[p] <= '9') {
                p++;
            }
            if (p == q) {
                throw Refused.INSTANCE;
            }
        }
        if (!endsValue() || p - start > 1000) {
            throw Refused.INSTANCE;
        }
        return JsonDoubleParser.parseDouble(m, start, p - start);
    }

    private boolean endsValue() {
        if (p >= end) {
            return true;
        }
        byte c = m[p];
        return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r'
                || c == '\t';
    }
}
