package dev.anchorwatch.flink;

/**
 * Counts one run of a batch (consecutive events of one window) into the window: each event
 * (its id once, when deduplicating) into the figures and the breakdown, then the run's best
 * anchors of the events counted. Keeps what the runs of a task share: which of a run's ids
 * were new, and each batch model's slot in the run's window (looked up once per run, not
 * per event).
 */
final class RunCounter {

    private final boolean deduplicate;

    /** Which of a run of a batch's ids were new to their set ({@link IdSet#addHashes}). */
    boolean[] fresh = new boolean[RouteSnapshots.BATCH_EVENTS];

    /** Per batch model (index + 1; 0: unknown), its slot, valid where stamped with the run. */
    private int[] modelSlot = new int[16];
    private int[] modelStamp = new int[16];
    private int run;

    RunCounter(boolean deduplicate) {
        this.deduplicate = deduplicate;
    }

    /** Ready for batch {@code b}. */
    void startBatch(DriftBatch b) {
        if (fresh.length < b.size) {
            fresh = new boolean[b.size];
        }
        if (modelStamp.length <= b.models.count) {
            modelSlot = new int[b.models.count + 1];
            modelStamp = new int[b.models.count + 1];
            run = 0;
        }
    }

    /**
     * Counts events [from, to) of {@code b} into {@code acc}; {@code candidate}: the batch's
     * first candidate anchor not yet taken. Returns the first one past this run.
     */
    int count(WindowFigures.Accumulator acc, DriftBatch b, int from, int to, int candidate) {
        if (deduplicate) {
            acc.ids.addHashes(b.idHigh, b.idLow, from, to, fresh);
        }
        WindowBreakdown breakdown = acc.breakdown;
        if (++run == Integer.MAX_VALUE) {
            java.util.Arrays.fill(modelStamp, 0);
            run = 1;
        }
        for (int k = from; k < to; k++) {
            if (!deduplicate || fresh[k - from]) {
                acc.add(b.meanDrift[k], b.anchorCount[k], b.disabled[k], b.resampleCount[k],
                        b.maxKlDivergence[k]);
                if (breakdown != null) {
                    breakdown.add(b, k, slotOf(breakdown, b, b.model[k]));
                }
            }
        }
        for (; candidate < b.candidates && b.candEvent[candidate] < to; candidate++) {
            int k = b.candEvent[candidate];
            if (breakdown != null && (!deduplicate || fresh[k - from])) {
                breakdown.offer(b, candidate);
            }
        }
        return candidate;
    }

    /** The first candidate past a run ending at {@code to} (a late run's are dropped). */
    static int skip(DriftBatch b, int candidate, int to) {
        while (candidate < b.candidates && b.candEvent[candidate] < to) {
            candidate++;
        }
        return candidate;
    }

    /** The window's slot of batch model {@code model} (-1: unknown), -1 for other. */
    private int slotOf(WindowBreakdown breakdown, DriftBatch b, int model) {
        int m = model + 1;
        if (modelStamp[m] != run) {
            modelStamp[m] = run;
            modelSlot[m] = breakdown.modelSlot(model < 0 ? null : b.models.names[model]);
        }
        return modelSlot[m];
    }
}
