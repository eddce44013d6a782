package dev.anchorwatch.flink;

import java.nio.charset.StandardCharsets;

/**
 * One snapshot's breakdown as the drift job reads it (anchorwatch/contracts/breakdown.py):
 * per anchor kind present (anchor count, mean drift, max drift) and its top anchors (id,
 * position, drift). Filled from the snapshot's {@code kinds} and {@code top_anchors}, the
 * JSON text ({@link BreakdownParser}) or a binary summary's fields ({@link
 * BinarySummaryDecoder}), each value held to the contract's rules here, in one place: a
 * part that breaks one is dropped whole (that snapshot adds no kinds, or no top anchors, to
 * its window) and the snapshot still counts, as a figure of the wrong type reads as NULL.
 *
 * <p>One holder serves every record of a source task in turn ({@link SnapshotDeserializer}):
 * what it holds is valid until the next record is decoded, by which time the route has
 * copied what it keeps. The top anchors' ids are ranges of the arrays they were read from.
 */
final class EventBreakdown {

    /** The kinds in the order figures are written (breakdown.KINDS), OTHER last. */
    static final String[] KINDS = {
        "SECTION", "ENTITY", "TABLE", "LIST", "CONDITION", "TIMELINE", "REFERENCE", "OTHER"
    };

    static final int KIND_COUNT = KINDS.length;

    private static final byte[][] KIND_NAMES = new byte[KIND_COUNT][];

    /** Per slot of a name's length and first byte, the one kind that can have it, or -1. */
    private static final int[] CANDIDATE = new int[256];

    static {
        java.util.Arrays.fill(CANDIDATE, -1);
        for (int k = 0; k < KIND_COUNT; k++) {
            KIND_NAMES[k] = KINDS[k].getBytes(StandardCharsets.US_ASCII);
            int slot = candidateSlot(KIND_NAMES[k].length, KIND_NAMES[k][0]);
            if (CANDIDATE[slot] >= 0) {
                throw new IllegalStateException(KINDS[k] + " shares a slot with "
                        + KINDS[CANDIDATE[slot]] + ": change candidateSlot");
            }
            CANDIDATE[slot] = k;
        }
    }

    private static int candidateSlot(int length, byte first) {
        return ((length << 5) ^ first) & 0xFF;
    }

    /** breakdown.TOP_ANCHORS_PER_EVENT: the contract allows no more. */
    static final int TOP_PER_EVENT = 3;

    /** The contract's identifiers: at most this many characters (IDENTIFIER_MAX_CHARS). */
    static final int MAX_ID_CHARS = 200;

    /**
     * Bit {@code 1 << kind} set for each kind present; 0 when none or refused. Final only
     * after {@link #endKinds}.
     */
    int kindMask;

    /** Kinds named so far, and those whose latest entry broke a rule. */
    private int seen;
    private int broken;

    /** An unknown kind was named: nothing can make the kinds right again. */
    private boolean kindsRefused;

    final int[] count = new int[KIND_COUNT];
    final double[] mean = new double[KIND_COUNT];
    final double[] max = new double[KIND_COUNT];

    /** Top anchors held; 0 when none or refused. */
    int topCount;

    private boolean topRefused;

    final byte[][] topArray = new byte[TOP_PER_EVENT][];
    final int[] topFrom = new int[TOP_PER_EVENT];
    final int[] topLength = new int[TOP_PER_EVENT];
    final long[] topPosition = new long[TOP_PER_EVENT];
    final double[] topDrift = new double[TOP_PER_EVENT];

    /** Empty again, for the next record. */
    EventBreakdown reset() {
        resetKinds();
        resetTop();
        return this;
    }

    void resetKinds() {
        kindMask = 0;
        seen = 0;
        broken = 0;
        kindsRefused = false;
    }

    void resetTop() {
        topCount = 0;
        topRefused = false;
    }

    /**
     * The kind whose name is these bytes, or -1 for a name the contract does not know. The
     * length and first byte pick the one name to compare ({@link #CANDIDATE}): an event
     * names most kinds, so this runs several times per event.
     */
    static int kindIndex(byte[] array, int from, int length) {
        if (length == 0) {
            return -1;
        }
        int k = CANDIDATE[candidateSlot(length, array[from])];
        if (k < 0 || KIND_NAMES[k].length != length) {
            return -1;
        }
        byte[] name = KIND_NAMES[k];
        for (int i = 0; i < length; i++) {
            if (array[from + i] != name[i]) {
                return -1;
            }
        }
        return k;
    }

    /**
     * One kind's figures. A later entry of the same kind replaces an earlier one whole, right
     * or wrong (JSON decoders keep the last of duplicate keys); {@link #endKinds} then
     * refuses every kind if one kept entry has a count that is not positive or a drift
     * outside [0, 1]. An unknown kind (-1) refuses them all.
     */
    void kind(int kind, long anchors, double meanDrift, double maxDrift) {
        if (kind < 0) {
            refuseKinds();
            return;
        }
        int bit = 1 << kind;
        seen |= bit;
        if (anchors < 1 || anchors > Integer.MAX_VALUE
                || !isProbability(meanDrift) || !isProbability(maxDrift)) {
            broken |= bit;
            return;
        }
        broken &= ~bit;
        count[kind] = (int) anchors;
        mean[kind] = meanDrift;
        max[kind] = maxDrift;
    }

    /** The latest entry of {@code kind} is not the shape of one (a wrong type, a key missing). */
    void brokenKind(int kind) {
        seen |= 1 << kind;
        broken |= 1 << kind;
    }

    void refuseKinds() {
        kindsRefused = true;
    }

    /** After the last entry: {@link #kindMask} the kinds kept, or 0 when refused. */
    void endKinds() {
        kindMask = kindsRefused || broken != 0 ? 0 : seen;
    }

    /**
     * One top anchor, its id {@code length} bytes of valid UTF-8 from {@code from} in {@code
     * array}. Refuses every top anchor past the contract's three, or for an id that is not
     * an identifier (1 to 200 characters, no control characters), a negative position or a
     * drift outside [0, 1].
     */
    void topAnchor(byte[] array, int from, int length, long position, double drift) {
        if (topRefused) {
            return;
        }
        if (topCount == TOP_PER_EVENT || !isIdentifier(array, from, length) || position < 0
                || !isProbability(drift)) {
            refuseTop();
            return;
        }
        addTop(array, from, length, position, drift);
    }

    /**
     * {@link #topAnchor} for an id of printable ASCII (0x20 to 0x7E) only, so of as many
     * characters as bytes and none of them a control character.
     */
    void topAnchorAscii(byte[] array, int from, int length, long position, double drift) {
        if (topRefused) {
            return;
        }
        if (topCount == TOP_PER_EVENT || length == 0 || length > MAX_ID_CHARS || position < 0
                || !isProbability(drift)) {
            refuseTop();
            return;
        }
        addTop(array, from, length, position, drift);
    }

    private void addTop(byte[] array, int from, int length, long position, double drift) {
        int i = topCount++;
        topArray[i] = array;
        topFrom[i] = from;
        topLength[i] = length;
        topPosition[i] = position;
        topDrift[i] = drift;
    }

    void refuseTop() {
        topRefused = true;
        topCount = 0;
    }

    private static final java.lang.invoke.VarHandle LONGS =
            java.lang.invoke.MethodHandles.byteArrayViewVarHandle(
                    long[].class, java.nio.ByteOrder.LITTLE_ENDIAN);

    private static final long ONES = 0x0101010101010101L;
    private static final long HIGHS = 0x8080808080808080L;

    /** Whether every byte is printable ASCII (0x20 to 0x7E): eight at a time (SWAR). */
    static boolean isPrintableAscii(byte[] array, int from, int length) {
        int i = from;
        int end = from + length;
        for (; i + 8 <= end; i += 8) {
            long x = (long) LONGS.get(array, i);
            long below = (x - 0x20 * ONES) & ~x;
            long del = x ^ (0x7F * ONES);
            if (((x | below | ((del - ONES) & ~del)) & HIGHS) != 0) {
                return false;
            }
        }
        for (; i < end; i++) {
            if (array[i] < 0x20 || array[i] == 0x7F) {
                return false;
            }
        }
        return true;
    }

    /** As the contract's Probability: a number in [0, 1] (NaN is not). */
    static boolean isProbability(double value) {
        return value >= 0.0 && value <= 1.0;
    }

    /**
     * As the contract's Identifier over valid UTF-8: 1 to 200 code points, none of them
     * U+0000-U+001F or U+007F (the pattern {@code ^[^\x00-\x1f\x7f]+$}).
     */
    static boolean isIdentifier(byte[] array, int from, int length) {
        if (length == 0) {
            return false;
        }
        if (isPrintableAscii(array, from, length)) {
            return length <= MAX_ID_CHARS;
        }
        int chars = 0;
        for (int i = from; i < from + length; i++) {
            int b = array[i];
            if ((b >= 0 && b < 0x20) || b == 0x7F) {
                return false;
            }
            if ((b & 0xC0) != 0x80) {
                chars++;
            }
        }
        return chars <= MAX_ID_CHARS;
    }
}
