package dev.anchorwatch.flink;

import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.annotation.FunctionHint;
import org.apache.flink.table.functions.AggregateFunction;
import org.apache.flink.types.Row;

/**
 * {@code merged_figures(partial)}: a window's figures from its shards' {@link ShardFigures}.
 * Counts, sums and the drift histogram add up, so the figures (the p95 included) are those of
 * the window's events taken together; only the order of floating-point additions differs.
 */
@FunctionHint(output = @DataTypeHint(Figures.RESULT))
public final class MergedFigures extends AggregateFunction<Row, Figures> {

    private static final long serialVersionUID = 1L;

    @Override
    public @DataTypeHint(value = "RAW", bridgedTo = Figures.class) Figures createAccumulator() {
        return new Figures();
    }

    public void accumulate(
            @DataTypeHint(value = "RAW", bridgedTo = Figures.class) Figures acc,
            @DataTypeHint(Figures.PARTIAL) Row partial) {
        if (partial != null) {
            acc.merge(partial);
        }
    }

    @Override
    public Row getValue(Figures acc) {
        return acc.result();
    }
}
