package dev.anchorwatch.flink;

import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * A window's id set on its own (no Kafka, no job): nanoseconds per id of adding the ids one
 * at a time ({@link IdSet#addHash}) and a run at a time ({@link IdSet#addHashes}, as the
 * window operator does), each into a set that grows from empty and into one sized for the
 * window up front, alternating in one process; and a differential check that both ways
 * answer "new" for the same ids and end with the same set. See run.py.
 *
 * <pre>
 *   idset-bench ROUNDS IDS   rounds of the four ways over IDS ids a window (10% repeats)
 *   idset-check SEED IDS     the differential check; exit status 1 on the first difference
 * </pre>
 */
public final class IdSetBench {

    /** Ids a run at most: a batch's size across the exchange. */
    private static final int RUN = RouteSnapshots.BATCH_EVENTS;

    public static void main(String[] args) {
        int ids = Integer.parseInt(args[2]);
        if (args[0].equals("idset-check")) {
            System.exit(check(Long.parseLong(args[1]), ids) ? 0 : 1);
        }
        int rounds = Integer.parseInt(args[1]);
        // The same ids for every way, each way into a set of its own.
        long[][] hashes = hashes(new SplittableRandom(7), ids, 0.10);
        boolean[] fresh = new boolean[RUN];
        String[] ways = {"one at a time", "a run at a time", "one at a time, sized",
                         "a run at a time, sized"};
        double[][] ns = new double[ways.length][rounds];
        long sink = 0;
        // A first, unreported round compiles all four.
        for (int round = -1; round < rounds; round++) {
            for (int way = 0; way < ways.length; way++) {
                IdSet set = way >= 2 ? IdSet.withCapacity(ids) : new IdSet();
                long started = System.nanoTime();
                if (way % 2 == 0) {
                    for (int i = 0; i < ids; i++) {
                        sink += set.addHash(hashes[0][i], hashes[1][i]) ? 1 : 0;
                    }
                } else {
                    for (int from = 0; from < ids; from += RUN) {
                        set.addHashes(hashes[0], hashes[1], from, Math.min(ids, from + RUN),
                                fresh);
                    }
                }
                long elapsed = System.nanoTime() - started;
                sink += set.size;
                if (round >= 0) {
                    ns[way][round] = (double) elapsed / ids;
                }
            }
        }
        System.out.printf("%,d ids a window (10%% repeats), %d rounds alternating (sink %d)%n",
                ids, rounds, sink % 10);
        for (int way = 0; way < ways.length; way++) {
            double[] sorted = ns[way].clone();
            Arrays.sort(sorted);
            System.out.printf("  %-24s median %6.1f ns/id  (min %.1f, max %.1f)%n", ways[way],
                    sorted[rounds / 2], sorted[0], sorted[rounds - 1]);
        }
    }

    /**
     * {@code ids} hashes, a share {@code repeats} of them repeating an earlier one (some in
     * the same run, some runs later), as the high and low halves.
     */
    private static long[][] hashes(SplittableRandom random, int ids, double repeats) {
        long[] high = new long[ids];
        long[] low = new long[ids];
        for (int i = 0; i < ids; i++) {
            if (i > 0 && random.nextDouble() < repeats) {
                int earlier = random.nextBoolean()
                        ? Math.max(0, i - 1 - random.nextInt(Math.min(i, 8)))
                        : random.nextInt(i);
                high[i] = high[earlier];
                low[i] = low[earlier];
            } else {
                high[i] = random.nextLong();
                low[i] = random.nextLong();
                // A few hashes share their high half (the slot) with another: long probes.
                if (i > 0 && random.nextInt(50) == 0) {
                    high[i] = high[random.nextInt(i)];
                }
                // And the one hash the set must nudge.
                if (i == ids / 2) {
                    high[i] = 0;
                    low[i] = 0;
                }
            }
        }
        return new long[][] {high, low};
    }

    /** Both ways over the same ids, in runs of random length: the same answers and set. */
    private static boolean check(long seed, int ids) {
        SplittableRandom random = new SplittableRandom(seed);
        long[][] hashes = hashes(random, ids, 0.15);
        IdSet one = new IdSet();
        IdSet runs = random.nextBoolean() ? new IdSet() : IdSet.withCapacity(random.nextInt(ids));
        boolean[] fresh = new boolean[RUN];
        int from = 0;
        int repeats = 0;
        while (from < ids) {
            int to = Math.min(ids, from + 1 + random.nextInt(RUN));
            runs.addHashes(hashes[0], hashes[1], from, to, fresh);
            for (int i = from; i < to; i++) {
                boolean isNew = one.addHash(hashes[0][i], hashes[1][i]);
                if (isNew != fresh[i - from]) {
                    System.out.printf("id %d: one at a time says new=%b, a run at a time %b%n",
                            i, isNew, fresh[i - from]);
                    return false;
                }
                repeats += isNew ? 0 : 1;
            }
            from = to;
        }
        if (one.size != runs.size || !Arrays.equals(contents(one), contents(runs))) {
            System.out.printf("sets differ: %d ids vs %d%n", one.size, runs.size);
            return false;
        }
        System.out.printf("the same answers for %,d ids (%,d repeats) and the same set%n",
                ids, repeats);
        return true;
    }

    /** A set's hashes, sorted: its contents whatever its table's size. */
    private static String[] contents(IdSet set) {
        String[] all = new String[set.size];
        int n = 0;
        for (int i = 0; i < set.slots.length; i += 2) {
            if (set.slots[i] != 0 || set.slots[i + 1] != 0) {
                all[n++] = set.slots[i] + ":" + set.slots[i + 1];
            }
        }
        Arrays.sort(all);
        return all;
    }
}
