package dev.anchorwatch.flink;

import java.nio.charset.StandardCharsets;
import java.text.Normalizer;
import java.util.Arrays;

/**
 * The models named in one batch, each once: an event carries the index of its model's name
 * here (-1: none, or a name the contract refuses), so a name crosses the network once per
 * batch, not once per event. Looked up by the name's UTF-8 bytes in an open-addressing table;
 * each distinct spelling is checked against the contract once, when first seen.
 */
final class ModelNames {

    /** The contract's MODEL_VERSION_MAX_CHARS. */
    static final int MAX_CHARS = 128;

    /** The names (valid, NFC), by index. */
    String[] names = new String[8];

    int count;

    // The table: per slot, 1 + the spelling's entry, or 0 when empty.
    private int[] slots = new int[32];
    private byte[][] spelling = new byte[16][];
    private int[] hashOf = new int[16];
    private int[] indexOf = new int[16];
    private int spellings;

    void clear() {
        Arrays.fill(names, 0, count, null);
        count = 0;
        Arrays.fill(slots, 0);
        Arrays.fill(spelling, 0, spellings, null);
        spellings = 0;
    }

    /** The index of the model these bytes name, or -1 when the contract refuses the name. */
    int indexOf(byte[] array, int from, int length) {
        int h = 1;
        for (int i = from; i < from + length; i++) {
            h = 31 * h + array[i];
        }
        int mask = slots.length - 1;
        for (int s = mix(h) & mask; ; s = (s + 1) & mask) {
            int entry = slots[s] - 1;
            if (entry < 0) {
                return add(s, h, array, from, length);
            }
            byte[] seen = spelling[entry];
            if (hashOf[entry] == h
                    && Arrays.equals(seen, 0, seen.length, array, from, from + length)) {
                return indexOf[entry];
            }
        }
    }

    private static int mix(int h) {
        return h ^ (h >>> 16);
    }

    private int add(int slot, int h, byte[] array, int from, int length) {
        String name = valid(array, from, length);
        int index = -1;
        if (name != null) {
            // Two spellings of one name (NFC) are one model.
            for (int i = 0; i < count && index < 0; i++) {
                if (names[i].equals(name)) {
                    index = i;
                }
            }
            if (index < 0) {
                if (count == names.length) {
                    names = Arrays.copyOf(names, 2 * count);
                }
                names[count] = name;
                index = count++;
            }
        }
        if (spellings == spelling.length) {
            spelling = Arrays.copyOf(spelling, 2 * spellings);
            hashOf = Arrays.copyOf(hashOf, 2 * spellings);
            indexOf = Arrays.copyOf(indexOf, 2 * spellings);
        }
        int entry = spellings++;
        spelling[entry] = Arrays.copyOfRange(array, from, from + length);
        hashOf[entry] = h;
        indexOf[entry] = index;
        slots[slot] = entry + 1;
        if (2 * spellings > slots.length) {
            rehash();
        }
        return index;
    }

    private void rehash() {
        slots = new int[2 * slots.length];
        int mask = slots.length - 1;
        for (int entry = 0; entry < spellings; entry++) {
            int s = mix(hashOf[entry]) & mask;
            while (slots[s] != 0) {
                s = (s + 1) & mask;
            }
            slots[s] = entry + 1;
        }
    }

    /**
     * The name as the contract's ModelVersion keeps it (NFC; 1 to 128 characters; no
     * control, format, line or paragraph separator characters; something visible), or null
     * when it refuses it. Printable ASCII, almost every name, needs no decoding.
     */
    static String valid(byte[] array, int from, int length) {
        if (length == 0 || length > 4 * MAX_CHARS) {
            return null;
        }
        boolean ascii = true;
        boolean visible = false;
        for (int i = from; i < from + length; i++) {
            int b = array[i];
            ascii &= b >= 0x20 && b < 0x7F;
            visible |= b > 0x20;
        }
        if (ascii) {
            return length <= MAX_CHARS && visible
                    ? new String(array, from, length, StandardCharsets.US_ASCII)
                    : null;
        }
        String raw = new String(array, from, length, StandardCharsets.UTF_8);
        if (raw.codePointCount(0, raw.length()) > MAX_CHARS) {
            return null;
        }
        String name = Normalizer.normalize(raw, Normalizer.Form.NFC);
        if (name.codePointCount(0, name.length()) > MAX_CHARS) {
            return null;
        }
        boolean seen = false;
        for (int i = 0; i < name.length(); ) {
            int c = name.codePointAt(i);
            i += Character.charCount(c);
            int type = Character.getType(c);
            if (type == Character.CONTROL || type == Character.FORMAT
                    || type == Character.LINE_SEPARATOR
                    || type == Character.PARAGRAPH_SEPARATOR
                    || type == Character.SURROGATE) {
                return null;
            }
            seen |= !(Character.isWhitespace(c) || Character.isSpaceChar(c) || isBlank(c)
                    || type == Character.NON_SPACING_MARK
                    || type == Character.ENCLOSING_MARK);
        }
        return seen ? name : null;
    }

    /** Letters and symbols that render as blank space (the contract's _BLANK). */
    private static boolean isBlank(int c) {
        return c == 0x115F || c == 0x1160 || c == 0x3164 || c == 0xFFA0 || c == 0x2800;
    }
}
