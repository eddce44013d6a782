package dev.anchorwatch.flink;

import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.annotation.FunctionHint;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.functions.AggregateFunction;
import org.apache.flink.types.Row;

/**
 * {@code shard_figures(event_id, mean_drift, anchor_count, snapshot_status, resample_count,
 * max_kl_divergence, deduplicate)}: {@link WindowFigures} over one shard of a window's events
 * (the job groups by doc type and {@link IdShard} of the event id), handing on the partial
 * figures {@link MergedFigures} adds up per window.
 *
 * <p>Why shards: a window's ids are its largest state, and each accumulator is one value to
 * the state backend: copied whole when a checkpoint meets it changing, serialized whole at
 * every flush of the window buffer with RocksDB. One doc type at 100k events/s holds millions
 * of ids a window, a single value of tens of MB (and a burst of one type, more). In shards each
 * value is a fraction of that, and a type's events spread over every parallel subtask instead
 * of one. Every copy of an id lands in the same shard, so counting it once stays exact.
 */
@FunctionHint(output = @DataTypeHint(Figures.PARTIAL))
public final class ShardFigures extends AggregateFunction<Row, WindowFigures.Accumulator> {

    private static final long serialVersionUID = 1L;

    private static final StringData DISABLED = StringData.fromString("disabled");

    @Override
    public @DataTypeHint(value = "RAW", bridgedTo = WindowFigures.Accumulator.class)
            WindowFigures.Accumulator createAccumulator() {
        return new WindowFigures.Accumulator();
    }

    public void accumulate(
            @DataTypeHint(value = "RAW", bridgedTo = WindowFigures.Accumulator.class)
                    WindowFigures.Accumulator acc,
            @DataTypeHint(value = "STRING", bridgedTo = StringData.class) StringData eventId,
            Double meanDrift,
            Integer anchorCount,
            @DataTypeHint(value = "STRING", bridgedTo = StringData.class) StringData status,
            Integer resampleCount,
            Double maxKlDivergence,
            Boolean deduplicate) {
        WindowFigures.add(acc, Boolean.TRUE.equals(deduplicate), eventId, meanDrift, anchorCount,
                DISABLED.equals(status), resampleCount == null ? 0 : resampleCount,
                maxKlDivergence == null ? 0.0 : maxKlDivergence);
    }

    @Override
    public Row getValue(WindowFigures.Accumulator acc) {
        return acc.figures.partial();
    }
}
