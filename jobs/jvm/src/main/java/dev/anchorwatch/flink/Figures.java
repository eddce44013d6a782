package dev.anchorwatch.flink;

import org.apache.flink.types.Row;

/**
 * The running figures of one drift window (or of one shard of it), and the arithmetic the
 * aggregates share: events added one at a time, shards' partial figures merged, the final
 * figures computed as the SQL they replace computes them (see {@link WindowFigures}).
 */
public final class Figures {

    /** Drift is rounded to 0.001 for the percentile: one counter per step of [0, 1]. */
    static final int STEPS = 1000;

    /** What a shard hands to the window's merge, in this order. */
    static final String PARTIAL =
            "ROW<request_count BIGINT, drift_sum DOUBLE, drift_sum_of_squares DOUBLE,"
                    + " max_drift DOUBLE, steps ARRAY<INT NOT NULL>, anchor_count BIGINT,"
                    + " disabled BIGINT, zero_anchors BIGINT, resamples BIGINT, kl_sum DOUBLE>";

    /** The window's figures, in this order. */
    static final String RESULT =
            "ROW<request_count BIGINT, mean_drift DOUBLE, max_drift DOUBLE,"
                    + " p95_drift DOUBLE, stddev_drift DOUBLE, anchor_count BIGINT,"
                    + " disabled_share DOUBLE, zero_anchor_share DOUBLE,"
                    + " resample_share DOUBLE, mean_kl_divergence DOUBLE>";

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

    /** One valid event (drift in [0, 1], anchor count present: the job passes only those). */
    void add(double drift, int anchorCount, boolean isDisabled, int resampleCount, double kl) {
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
        if (isDisabled) {
            disabled++;
        }
        if (anchorCount == 0) {
            zeroAnchors++;
        }
        resamples += resampleCount;
        klSum += kl;
    }

    /** A shard's figures, as {@link #PARTIAL}; null when it saw no event. */
    Row partial() {
        if (count == 0) {
            return null;
        }
        // Boxed: a ROW field's default conversion for ARRAY<INT> (a few hundred a window).
        Integer[] boxed = new Integer[STEPS + 1];
        for (int i = 0; i <= STEPS; i++) {
            boxed[i] = steps[i];
        }
        return Row.of(
                count, sum, sumOfSquares, max, boxed, anchors, disabled, zeroAnchors, resamples,
                klSum);
    }

    /** Adds a shard's figures (a {@link #PARTIAL} row). */
    void merge(Row partial) {
        long n = (Long) partial.getField(0);
        if (n == 0) {
            return;
        }
        count += n;
        sum += (Double) partial.getField(1);
        sumOfSquares += (Double) partial.getField(2);
        max = Math.max(max, (Double) partial.getField(3));
        Integer[] theirs = (Integer[]) partial.getField(4);
        if (steps == null) {
            steps = new int[STEPS + 1];
        }
        for (int i = 0; i <= STEPS; i++) {
            steps[i] = Math.addExact(steps[i], theirs[i]);
        }
        anchors += (Long) partial.getField(5);
        disabled += (Long) partial.getField(6);
        zeroAnchors += (Long) partial.getField(7);
        resamples += (Long) partial.getField(8);
        klSum += (Double) partial.getField(9);
    }

    /** The window's figures, as {@link #RESULT}; null when it saw no event. */
    Row result() {
        if (count == 0) {
            return null;
        }
        double n = count;
        // VAR_POP as the planner rewrites it: (SUM(x * x) - SUM(x) * SUM(x) / COUNT(x)) / COUNT(x).
        double variance = (sumOfSquares - sum * sum / n) / n;
        return Row.of(
                count,
                sum / n,
                max,
                percentile(steps, count, 0.95),
                Math.sqrt(Math.max(variance, 0.0)),
                anchors,
                disabled / n,
                zeroAnchors / n,
                anchors == 0 ? null : (double) resamples / anchors,
                klSum / n);
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
