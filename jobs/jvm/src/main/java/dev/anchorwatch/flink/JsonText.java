package dev.anchorwatch.flink;

import java.nio.charset.StandardCharsets;

/**
 * Writing JSON text: strings escaped as RFC 8259 requires (quote, backslash, control
 * characters; everything else as is), doubles as Java's shortest round-tripping decimal
 * ({@link Double#toString}, which Python's float() reads back to the same bits), the
 * non-finite ones quoted as Jackson writes them (no reader here takes them as numbers).
 */
final class JsonText {

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private JsonText() {}

    static String utf8(byte[] array, int from, int length) {
        return new String(array, from, length, StandardCharsets.UTF_8);
    }

    static void string(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append("\\u00").append(HEX[c >> 4]).append(HEX[c & 0xF]);
            } else {
                out.append(c);
            }
        }
        out.append('"');
    }

    static void number(StringBuilder out, double value) {
        if (Double.isFinite(value)) {
            out.append(value);
        } else {
            out.append('"').append(value).append('"');
        }
    }

    /** A string, or null. */
    static void nullable(StringBuilder out, String s) {
        if (s == null) {
            out.append("null");
        } else {
            string(out, s);
        }
    }
}
