package dev.anchorwatch.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.charset.StandardCharsets;

import org.junit.jupiter.api.Test;

/** A batch's models: each name once, held to the contract's ModelVersion. */
class ModelNamesTest {

    static String valid(String name) {
        byte[] utf8 = name.getBytes(StandardCharsets.UTF_8);
        return ModelNames.valid(utf8, 0, utf8.length);
    }

    static int index(ModelNames names, String name) {
        byte[] utf8 = name.getBytes(StandardCharsets.UTF_8);
        return names.indexOf(utf8, 0, utf8.length);
    }

    @Test
    void namesTheContractRefusesAreNone() {
        assertEquals("claude-x-2", valid("claude-x-2"));
        assertEquals("a b", valid("a b"));
        assertEquals("x".repeat(128), valid("x".repeat(128)));
        assertEquals("\u00e9".repeat(128), valid("\u00e9".repeat(128)));
        // NFC: the decomposed form is the same model as the composed one.
        assertEquals("caf\u00e9", valid("cafe\u0301"));
        String[] refused = {
            "", " ", "   ", "x".repeat(129), "\u00e9".repeat(129), "a\u0001", "a\u007f",
            "a\u200b", "a\u2028", "\u3164", "\u0301", "\u00a0",
        };
        for (String name : refused) {
            assertNull(valid(name), name);
        }
    }

    @Test
    void eachNameIsKeptOncePerBatch() {
        ModelNames names = new ModelNames();
        assertEquals(0, index(names, "m-1"));
        assertEquals(1, index(names, "m-2"));
        assertEquals(0, index(names, "m-1"));
        assertEquals(-1, index(names, "bad\u0001"));
        assertEquals(-1, index(names, "bad\u0001"));
        assertEquals(2, index(names, "caf\u00e9"));
        assertEquals(2, index(names, "cafe\u0301"));
        for (int m = 0; m < 1_000; m++) {
            assertEquals(3 + m, index(names, "n-" + m));
        }
        assertEquals(1, index(names, "m-2"));
        assertEquals(1_003, names.count);
        names.clear();
        assertEquals(0, index(names, "m-2"));
    }
}
