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
@FunctionHint(output = @DataTypeHint(Figures.RESULT))
public final class WindowFigures extends AggregateFunction<Row, WindowFigures.Accumulator> {

    private static final long serialVersionUID = 1L;

    private static final StringData DISABLED = StringData.fromString("disabled");

    /** A window's running figures and ids; held on the heap as one object (a RAW value). */
    public static final class Accumulator {
        public Figures figures = new Figures();
        public IdSet ids = new IdSet();
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
        // The job passes only valid events: drift in [0, 1], anchor_count present.
        add(acc, Boolean.TRUE.equals(deduplicate), eventId, meanDrift, anchorCount,
                DISABLED.equals(status), resampleCount == null ? 0 : resampleCount,
                maxKlDivergence == null ? 0.0 : maxKlDivergence);
    }

    /**
     * One event into a window's (or a shard's) figures, unless its id was seen there. (Its
     * parameters differ from {@code accumulate}'s in type: Flink reads parameter names from
     * the bytecode by signature.)
     */
    static void add(
            Accumulator acc,
            boolean deduplicate,
            StringData eventId,
            double drift,
            int anchors,
            boolean disabled,
            int resamples,
            double kl) {
        if (deduplicate && !acc.ids.add(eventId.toBytes())) {
            return;
        }
        acc.figures.add(drift, anchors, disabled, resamples, kl);
    }

    @Override
    public Row getValue(Accumulator acc) {
        return acc.figures.result();
    }
}
