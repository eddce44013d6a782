package dev.anchorwatch.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Random;

import org.junit.jupiter.api.Test;

/** The byte checks done eight at a time agree with the plain ones, byte by byte. */
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
}
