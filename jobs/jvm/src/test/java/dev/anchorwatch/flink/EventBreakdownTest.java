package dev.anchorwatch.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.Random;

import org.junit.jupiter.api.Test;

/**
 * The byte checks done eight at a time agree with the plain ones, byte by byte; the kind
 * lookup agrees with a search of the names.
 */
class EventBreakdownTest {

    @Test
    void printableAsciiAndBackslashesAreFoundEightBytesAtATime() {
        Random random = new Random(34);
        byte[] picks = {0x00, 0x1F, 0x20, 0x41, 0x5C, 0x7E, 0x7F, (byte) 0x80, (byte) 0xC3,
            (byte) 0xFF};
        for (int n = 0; n < 100_000; n++) {
            byte[] m = new byte[random.nextInt(40)];
            for (int i = 0; i < m.length; i++) {
                m[i] = random.nextInt(4) == 0 ? picks[random.nextInt(picks.length)]
                        : (byte) (0x21 + random.nextInt(0x5A));
            }
            int from = m.length == 0 ? 0 : random.nextInt(m.length);
            int to = from + (m.length == from ? 0 : random.nextInt(m.length - from + 1));
            boolean printable = true;
            boolean backslash = false;
            for (int i = from; i < to; i++) {
                printable &= m[i] >= 0x20 && m[i] < 0x7F;
                backslash |= m[i] == '\\';
            }
            assertEquals(printable, EventBreakdown.isPrintableAscii(m, from, to - from));
            assertEquals(backslash, JsonSyntax.hasBackslash(m, from, to));
        }
    }

    @Test
    void aStringsPlainRunEndsWhereTheByteByByteScanSaysEightBytesAtATime() {
        Random random = new Random(16);
        byte[] picks = {0x00, 0x1F, 0x20, 0x21, '"', '\\', 0x5B, 0x5D, 0x7E, 0x7F, (byte) 0x80,
            (byte) 0xC3, (byte) 0xDF, (byte) 0xFF};
        for (int round = 0; round < 100_000; round++) {
            byte[] m = new byte[random.nextInt(48)];
            // Mostly long plain runs, so the eight-byte steps meet the marks at every offset.
            int rarity = 1 + random.nextInt(40);
            for (int i = 0; i < m.length; i++) {
                m[i] = random.nextInt(rarity) == 0 ? picks[random.nextInt(picks.length)]
                        : (byte) (0x20 + random.nextInt(0x60));
            }
            int n = random.nextInt(m.length + 1);
            int p = random.nextInt(n + 1);
            int expected = p;
            while (expected < n && JsonSyntax.PLAIN[m[expected] & 0xFF]) {
                expected++;
            }
            assertEquals(expected, JsonSyntax.plainRunEnd(m, p, n));
        }
    }

    @Test
    void aKindIsFoundByItsExactNameAnywhereInTheArrayAndNothingElseIsOne() {
        String[] others = {
            "", "S", "LIS", "LISTS", "list", "TABLE_", "TABLF", "OTHEr", "ENTITZ", "SECTIO",
            "SECTIONS", "TIMELINF", "CONDITIOM", "REFERENCF", "DONDITION", "QEFERENCE",
            "PTHER", "UABLE", "AAAAAAAAAA", "SECTION\u0000", "ÉNTITY"
        };
        Random random = new Random(7);
        for (int round = 0; round < 1_000; round++) {
            boolean known = random.nextBoolean();
            int k = random.nextInt(EventBreakdown.KIND_COUNT);
            String name = known ? EventBreakdown.KINDS[k] : others[random.nextInt(others.length)];
            byte[] utf8 = name.getBytes(StandardCharsets.UTF_8);
            byte[] m = new byte[utf8.length + random.nextInt(8) + random.nextInt(8)];
            int from = random.nextInt(m.length - utf8.length + 1);
            random.nextBytes(m);
            System.arraycopy(utf8, 0, m, from, utf8.length);
            int expected = java.util.Arrays.asList(EventBreakdown.KINDS).indexOf(name);
            assertEquals(expected, EventBreakdown.kindIndex(m, from, utf8.length), name);
        }
    }
}
