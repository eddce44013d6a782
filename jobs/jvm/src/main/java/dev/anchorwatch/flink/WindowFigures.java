package dev.anchorwatch.flink;

import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.annotation.FunctionHint;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.functions.AggregateFunction;
import org.apache.flink.types.Row;

/**
 * {@code window_figures(event_id, mean_drift, anchor_count, snapshot_status, resample_count,
 * max_kl_divergence, deduplicate)}: every figure of one drift window in one aggregate, each
 * {@code event_id} counted once when {@code deduplicate} is true.
 *
 * <p>Why one function instead of SQL's COUNT / AVG / PERCENTILE with a deduplication ahead of
 * them: Flink's deduplication keys every event by its id (a network exchange of every row)
 * and keeps one TTL'd state entry of about 200 bytes per id, cleaned incrementally on every
 * access and copied whole into each checkpoint; it cost the job more CPU than reading and
 * parsing the snapshots. A duplicate has the same doc type and event time as its original (it
 * is the same record sent again), so it always lands in the same window: remembering a
 * window's ids while the window is open catches every duplicate that could skew it, and the
 * ids go with the window when it fires. Here an id is 16 bytes (its 128-bit hash, see {@link
 * IdSet}), the rows are exchanged once (by doc type), and there is no per-id timer or TTL.
 *
 * <p>The figures are those of the SQL they replace, with the same arithmetic, in the order
 * the events arrive: {@code p95_drift} is PERCENTILE (linear interpolation between closest
 * ranks) over drift rounded half up to 0.001; {@code stddev_drift} is the population
 * deviation from sums, its variance clamped at zero. There is no {@code merge}: with one, the
 * planner would pre-aggregate before the exchange and ship every partial id set across it.
 */
@FunctionHint(
        output =
                @DataTypeHint(
                        "ROW<request_count BIGINT, mean_drift DOUBLE, max_drift DOUBLE,"
                                + " p95_drift DOUBLE, stddev_drift DOUBLE, anchor_count BIGINT,"
                                + " disabled_share DOUBLE, zero_anchor_share DOUBLE,"
                                + " resample_share DOUBLE, mean_kl_divergence DOUBLE>"))
public final class WindowFigures extends AggregateFunction<Row, WindowFigures.Accumulator> {

    private static final long serialVersionUID = 1L;

    /** Drift is rounded to 0.001 for the percentile: one counter per step of [0, 1]. */
    static final int STEPS = 1000;

    private static final StringData DISABLED = StringData.fromString("disabled");

    /** A window's running figures; held on the heap as one object (a RAW value). */
    public static final class Accumulator {
        public long count;
        public double sum;
        public double sumOfSquares;
        public double max = Double.NEGATIVE_INFINITY;
        /** Events per rounded drift step, allocated with the first event. */
        public int[] steps;
        public long anchors;
        public long disabled;
        public long zeroAnchors;
        public long resamples;
        public double klSum;
        public IdSet ids = new IdSet();
        /**
         * The window's breakdown, when the drift job counts it (null in the SQL aggregate,
         * and in a window restored from a job before it). Transient: not part of the SQL
         * aggregate's state type; {@link AccumulatorSerializer} writes it.
         */
        public transient WindowBreakdown breakdown;

        /** Counts one event (its id, if deduplicating, already checked). */
        void add(double drift, int anchorCount, boolean disabledStatus, int resampleCount,
                double klDivergence) {
            count++;
            sum += drift;
            sumOfSquares += drift * drift;
            max = Math.max(max, drift);
            if (steps == null) {
                steps = new int[STEPS + 1];
            }
            // As SQL's CAST(drift * 1000 + 0.5 AS BIGINT).
            int step = (int) (drift * STEPS + 0.5);
            steps[step] = Math.addExact(steps[step], 1);
            anchors += anchorCount;
            if (disabledStatus) {
                disabled++;
            }
            if (anchorCount == 0) {
                zeroAnchors++;
            }
            resamples += resampleCount;
            klSum += klDivergence;
        }
    }

    @Override
    public @DataTypeHint(value = "RAW", bridgedTo = Accumulator.class) Accumulator
            createAccumulator() {
        return new Accumulator();
    }

    public void accumulate(
            @DataTypeHint(value = "RAW", bridgedTo = Accumulator.class) Accumulator acc,
            @DataTypeHint(value = "STRING", bridgedTo = StringData.class) StringData eventId,
            Double meanDrift,
            Integer anchorCount,
            @DataTypeHint(value = "STRING", bridgedTo = StringData.class) StringData status,
            Integer resampleCount,
            Double maxKlDivergence,
            Boolean deduplicate) {
        if (Boolean.TRUE.equals(deduplicate) && !acc.ids.add(eventId.toBytes())) {
            return;
        }
        // The job passes only valid events: drift in [0, 1], anchor_count present.
        acc.add(
                meanDrift,
                anchorCount,
                DISABLED.equals(status),
                resampleCount == null ? 0 : resampleCount,
                maxKlDivergence == null ? 0.0 : maxKlDivergence);
    }

    @Override
    public Row getValue(Accumulator acc) {
        if (acc.count == 0) {
            return null;
        }
        return figures(acc);
    }

    /** The figures of a window with at least one event, in the order of the output type. */
    static Row figures(Accumulator acc) {
        double n = acc.count;
        // VAR_POP as the planner rewrites it: (SUM(x * x) - SUM(x) * SUM(x) / COUNT(x)) / COUNT(x).
        double variance = (acc.sumOfSquares - acc.sum * acc.sum / n) / n;
        return Row.of(
                acc.count,
                acc.sum / n,
                acc.max,
                percentile(acc.steps, acc.count, 0.95),
                Math.sqrt(Math.max(variance, 0.0)),
                acc.anchors,
                acc.disabled / n,
                acc.zeroAnchors / n,
                acc.anchors == 0 ? null : (double) acc.resamples / acc.anchors,
                acc.klSum / n);
    }

    /**
     * Flink's PERCENTILE over values {@code step / 1000.0} held {@code counts[step]} times:
     * position {@code q * (n - 1) + 1} counted from the smallest, a value where the position
     * falls on one, else the linear interpolation between its neighbours.
     */
    static double percentile(int[] counts, long n, double q) {
        double position = q * (n - 1) + 1;
        long lower = (long) Math.floor(position);
        long higher = (long) Math.ceil(position);
        // The smallest step at which the running count reaches the lower rank (at least 1).
        int step = -1;
        long seen = 0;
        while (seen < lower) {
            step++;
            seen += counts[step];
        }
        if (seen >= higher) {
            return step / (double) STEPS;
        }
        int next = step + 1;
        while (counts[next] == 0) {
            next++;
        }
        return (higher - position) * (step / (double) STEPS)
                + (position - lower) * (next / (double) STEPS);
    }
}
