package dev.anchorwatch.flink;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * JSON's syntax over UTF-8 bytes, checked without building anything ({@link
 * TopLevelFieldScanner}'s and {@link BreakdownParser}'s): each method returns the position
 * after what it checked, or {@link #UNSURE} for input it will not vouch for (malformed, or
 * merely past what Jackson is sure to accept the same way: deep nesting, long numbers, raw
 * control characters, a literal run into another word).
 */
final class JsonSyntax {

    private JsonSyntax() {}

    static final int UNSURE = -1;

    // Well below Jackson's own limits (nesting 1000, numbers 1000 characters): past these
    // Jackson might refuse a document the scanner would accept.
    private static final int MAX_DEPTH = 256;
    private static final int MAX_NUMBER_CHARS = 64;

    /** Bytes that may follow one another inside a string without a closer look. */
    static final boolean[] PLAIN = new boolean[256];

    static {
        for (int b = 0x20; b < 0x80; b++) {
            PLAIN[b] = b != '"' && b != '\\';
        }
    }

    /**
     * A JSON column's object or array at {@code p}, checked: the position after it, or
     * UNSURE when it is not well-formed or a string in it has an escape (Jackson unescapes
     * and re-escapes its own way: let it).
     */
    static int skipJson(byte[] m, int p, int n) {
        int end = skipValue(m, p, n, 1);
        return end < 0 || hasBackslash(m, p, end) ? UNSURE : end;
    }

    private static final VarHandle LONGS =
            MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    /** Whether a backslash is in m[from, to): eight bytes at a time (SWAR). */
    static boolean hasBackslash(byte[] m, int from, int to) {
        int i = from;
        for (; i + 8 <= to; i += 8) {
            long x = (long) LONGS.get(m, i) ^ 0x5C5C5C5C5C5C5C5CL;
            if (((x - 0x0101010101010101L) & ~x & 0x8080808080808080L) != 0) {
                return true;
            }
        }
        for (; i < to; i++) {
            if (m[i] == '\\') {
                return true;
            }
        }
        return false;
    }

    static int ws(byte[] m, int p, int n) {
        while (p < n) {
            byte c = m[p];
            if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
                break;
            }
            p++;
        }
        return p;
    }

    /** Checks any JSON value at {@code p}; returns the position after it, or -1. */
    static int skipValue(byte[] m, int p, int n, int depth) {
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
    static int plainStringEnd(byte[] m, int p, int n) {
        p = plainRunEnd(m, p, n);
        return p < n && m[p] == '"' ? p : UNSURE;
    }

    private static final long ONES = 0x0101010101010101L;
    private static final long HIGHS = 0x8080808080808080L;

    /**
     * The first position from {@code p} on whose byte is not {@link #PLAIN} (a quote, a
     * backslash, a control character or a byte of a multi-byte character), or {@code n}:
     * eight bytes at a time (SWAR), as most of a snapshot is strings to step over.
     */
    static int plainRunEnd(byte[] m, int p, int n) {
        for (; p + 8 <= n; p += 8) {
            long x = (long) LONGS.get(m, p);
            long quote = x ^ 0x2222222222222222L;
            long backslash = x ^ 0x5C5C5C5C5C5C5C5CL;
            // Per byte, the high bit set where it is a quote, a backslash, below 0x20 or
            // 0x80 and up. A borrow can mark a byte past a marked one, never before it, so the
            // lowest mark (little-endian: the first byte) is exact.
            long marks = (((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash)
                    | ((x - 0x20 * ONES) & ~x) | x) & HIGHS;
            if (marks != 0) {
                return p + (Long.numberOfTrailingZeros(marks) >>> 3);
            }
        }
        while (p < n && PLAIN[m[p] & 0xFF]) {
            p++;
        }
        return p;
    }

    /** Position after the closing quote of a string whose content starts at {@code p}. */
    private static int stringEnd(byte[] m, int p, int n) {
        while (true) {
            p = plainRunEnd(m, p, n);
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
    static int numberEnd(byte[] m, int p, int n) {
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
    static final byte[] NULL = {'n', 'u', 'l', 'l'};

    static int literal(byte[] m, int p, int n, byte[] word) {
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
