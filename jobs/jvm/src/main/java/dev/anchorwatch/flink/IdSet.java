package dev.anchorwatch.flink;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * The event ids seen in one window, each kept as the 128-bit MurmurHash3 (x64) of its UTF-8
 * bytes in an open-addressing table of longs, at most three quarters full: 16 bytes a slot,
 * 21-43 bytes an id, no object per id. Two distinct
 * ids share a hash with probability about n² / 2¹²⁹ for n ids in a window (10⁻²⁵ for a
 * million), the only way an event could be taken for a duplicate.
 */
public final class IdSet {

    private static final int MIN_SLOTS = 16;

    private static final VarHandle LITTLE_ENDIAN_LONG =
            MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    /** Two longs per slot; a slot of two zeros is empty (a hash of two zeros is nudged). */
    public long[] slots = new long[2 * MIN_SLOTS];

    public int size;

    /** Adds the id; false when it was there already. */
    public boolean add(byte[] id) {
        long[] hash = murmur3x64(id);
        return addHash(hash[0], hash[1]);
    }

    /** An empty set with room for {@code n} ids before it grows. */
    static IdSet withCapacity(int n) {
        IdSet set = new IdSet();
        int slots = MIN_SLOTS;
        while (!fits(n, slots)) {
            slots *= 2;
        }
        set.slots = new long[2 * slots];
        return set;
    }

    /** A copy sharing nothing with this set. */
    IdSet copy() {
        IdSet set = new IdSet();
        set.slots = slots.clone();
        set.size = size;
        return set;
    }

    /** Adds the id of hash {@code (h1, h2)} ({@link #murmur3x64}); false when it was there. */
    public boolean addHash(long h1, long h2) {
        makeRoom(1);
        if (!insert(slots, h1, h2)) {
            return false;
        }
        size++;
        return true;
    }

    /**
     * Adds the ids of hashes {@code (high[i], low[i])} for i in [from, to), in that order;
     * {@code fresh[i - from]} says whether each was new (a later repeat in the run is not);
     * returns how many were.
     *
     * <p>Why a run at a time: a window's table outgrows the CPU caches (16 bytes an id, a
     * million ids per window are 32 MB), so each insert waits on a cache miss, and one at a
     * time they wait in turn. Here the run's slots are first only read, loads that do not
     * depend on each other, so the CPU has many misses in flight at once; the inserts then
     * find their lines in cache. The table grows at most once, up front, for the whole run.
     */
    public int addHashes(long[] high, long[] low, int from, int to, boolean[] fresh) {
        makeRoom(to - from);
        long[] table = slots;
        int mask = table.length / 2 - 1;
        long touched = 0;
        for (int i = from; i < to; i++) {
            touched += table[2 * ((int) high[i] & mask)];
        }
        // Kept, so the compiler keeps the loads above (their only purpose is their misses).
        warmed += touched;
        int added = 0;
        for (int i = from; i < to; i++) {
            boolean isNew = insert(table, high[i], low[i]);
            fresh[i - from] = isNew;
            if (isNew) {
                added++;
            }
        }
        size += added;
        return added;
    }

    /**
     * A sink for {@link #addHashes}' warming loads; it means nothing (static: not a field of
     * the set, which Flink's type extraction would take for part of the accumulator).
     */
    private static long warmed;

    /**
     * Whether {@code ids} ids fit {@code slotCount} slots: kept at most three quarters full
     * (memory counts more than a few more probes here).
     */
    private static boolean fits(long ids, int slotCount) {
        return 4L * ids <= 3L * slotCount;
    }

    /** Grows the table until {@code more} more ids would fit. */
    private void makeRoom(int more) {
        while (!fits((long) size + more, slots.length / 2)) {
            grow();
        }
    }

    /** Puts the hash in the table unless it is there; a hash of two zeros goes in nudged. */
    private static boolean insert(long[] table, long h1, long h2) {
        if (h1 == 0 && h2 == 0) {
            h2 = 1;
        }
        int mask = table.length / 2 - 1;
        int slot = (int) h1 & mask;
        while (true) {
            long a = table[2 * slot];
            long b = table[2 * slot + 1];
            if (a == 0 && b == 0) {
                table[2 * slot] = h1;
                table[2 * slot + 1] = h2;
                return true;
            }
            if (a == h1 && b == h2) {
                return false;
            }
            slot = (slot + 1) & mask;
        }
    }

    private void grow() {
        long[] bigger = new long[slots.length * 2];
        for (int i = 0; i < slots.length; i += 2) {
            if (slots[i] != 0 || slots[i + 1] != 0) {
                insert(bigger, slots[i], slots[i + 1]);
            }
        }
        slots = bigger;
    }

    /** MurmurHash3_x64_128 with seed 0: {h1, h2}. */
    static long[] murmur3x64(byte[] data) {
        return murmur3x64(data, 0, data.length);
    }

    /** {@link #murmur3x64(byte[])} of {@code length} bytes of {@code data} from {@code from}. */
    @SuppressWarnings("fallthrough")
    static long[] murmur3x64(byte[] data, int from, int length) {
        final long c1 = 0x87c37b91114253d5L;
        final long c2 = 0x4cf5ad432745937fL;
        long h1 = 0;
        long h2 = 0;
        int blocks = length / 16;
        for (int i = 0; i < blocks; i++) {
            long k1 = getLong(data, from + i * 16);
            long k2 = getLong(data, from + i * 16 + 8);
            k1 *= c1;
            k1 = Long.rotateLeft(k1, 31);
            k1 *= c2;
            h1 ^= k1;
            h1 = Long.rotateLeft(h1, 27);
            h1 += h2;
            h1 = h1 * 5 + 0x52dce729;
            k2 *= c2;
            k2 = Long.rotateLeft(k2, 33);
            k2 *= c1;
            h2 ^= k2;
            h2 = Long.rotateLeft(h2, 31);
            h2 += h1;
            h2 = h2 * 5 + 0x38495ab5;
        }
        int tail = from + blocks * 16;
        long k1 = 0;
        long k2 = 0;
        switch (length & 15) {
            case 15: k2 ^= (long) (data[tail + 14] & 0xff) << 48; // fall through
            case 14: k2 ^= (long) (data[tail + 13] & 0xff) << 40; // fall through
            case 13: k2 ^= (long) (data[tail + 12] & 0xff) << 32; // fall through
            case 12: k2 ^= (long) (data[tail + 11] & 0xff) << 24; // fall through
            case 11: k2 ^= (long) (data[tail + 10] & 0xff) << 16; // fall through
            case 10: k2 ^= (long) (data[tail + 9] & 0xff) << 8; // fall through
            case 9:
                k2 ^= data[tail + 8] & 0xff;
                k2 *= c2;
                k2 = Long.rotateLeft(k2, 33);
                k2 *= c1;
                h2 ^= k2;
                // fall through
            case 8: k1 ^= (long) (data[tail + 7] & 0xff) << 56; // fall through
            case 7: k1 ^= (long) (data[tail + 6] & 0xff) << 48; // fall through
            case 6: k1 ^= (long) (data[tail + 5] & 0xff) << 40; // fall through
            case 5: k1 ^= (long) (data[tail + 4] & 0xff) << 32; // fall through
            case 4: k1 ^= (long) (data[tail + 3] & 0xff) << 24; // fall through
            case 3: k1 ^= (long) (data[tail + 2] & 0xff) << 16; // fall through
            case 2: k1 ^= (long) (data[tail + 1] & 0xff) << 8; // fall through
            case 1:
                k1 ^= data[tail] & 0xff;
                k1 *= c1;
                k1 = Long.rotateLeft(k1, 31);
                k1 *= c2;
                h1 ^= k1;
                // fall through
            default:
                break;
        }
        h1 ^= length;
        h2 ^= length;
        h1 += h2;
        h2 += h1;
        h1 = fmix(h1);
        h2 = fmix(h2);
        h1 += h2;
        h2 += h1;
        return new long[] {h1, h2};
    }

    /** Eight bytes as a little-endian long, as MurmurHash3 reads its blocks. */
    private static long getLong(byte[] b, int i) {
        return (long) LITTLE_ENDIAN_LONG.get(b, i);
    }

    private static long fmix(long k) {
        k ^= k >>> 33;
        k *= 0xff51afd7ed558ccdL;
        k ^= k >>> 33;
        k *= 0xc4ceb9fe1a85ec53L;
        k ^= k >>> 33;
        return k;
    }
}
