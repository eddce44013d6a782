package dev.anchorwatch.flink;

import java.util.Arrays;

/**
 * The order of top anchors (breakdown.anchor_order): highest drift first, then the lower
 * position, then the id (UTF-8 bytes compared unsigned: the order of their code points, as
 * Python compares strings). Anchors equal in all three keep the order they arrived in, as
 * Python's stable sort does: a newcomer goes after its equals.
 */
final class TopOrder {

    private TopOrder() {}

    /** Negative when anchor a comes before anchor b, positive after, 0 when equal. */
    static int compare(double driftA, long positionA, byte[] idA, int fromA, int lengthA,
            double driftB, long positionB, byte[] idB, int fromB, int lengthB) {
        if (driftA != driftB) {
            return driftA > driftB ? -1 : 1;
        }
        if (positionA != positionB) {
            return positionA < positionB ? -1 : 1;
        }
        return Arrays.compareUnsigned(idA, fromA, fromA + lengthA, idB, fromB, fromB + lengthB);
    }

    /**
     * Where a newcomer goes among {@code n} anchors held in order from {@code first} on:
     * after every one that comes before it or equals it; {@code n} when after them all.
     */
    static int place(double[] drift, long[] position, byte[][] id, int first, int n,
            double newDrift, long newPosition, byte[] newId, int from, int length) {
        int at = n;
        while (at > 0) {
            int i = first + at - 1;
            if (compare(drift[i], position[i], id[i], 0, id[i].length,
                    newDrift, newPosition, newId, from, length) <= 0) {
                break;
            }
            at--;
        }
        return at;
    }
}
