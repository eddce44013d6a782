package dev.anchorwatch.flink;

import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.table.data.RowData;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * Chained to the source: sends each valid event that the watermark has not passed on to its
 * window as a {@link DriftEvent}, and everything else (invalid records, late events) to the
 * side output ({@link DriftFront#getOthers}) as a row for the job's SQL, which names the reason
 * of a dead letter and tallies the late events. Late is decided as SQL's CURRENT_WATERMARK
 * does here: the event time is at or behind the last watermark this task passed on.
 */
final class RouteSnapshots extends ProcessFunction<SnapshotRecord, DriftEvent> {

    private static final long serialVersionUID = 1L;

    private final OutputTag<Row> others;
    private final boolean deduplicate;
    private final int maxIdChars;
    private final int maxDocTypeChars;

    RouteSnapshots(OutputTag<Row> others, boolean deduplicate, int maxIdChars,
            int maxDocTypeChars) {
        this.others = others;
        this.deduplicate = deduplicate;
        this.maxIdChars = maxIdChars;
        this.maxDocTypeChars = maxDocTypeChars;
    }

    @Override
    public void processElement(SnapshotRecord record, Context ctx, Collector<DriftEvent> out) {
        if (!record.isValid(maxIdChars, maxDocTypeChars)) {
            ctx.output(others, record.toRow(false));
            return;
        }
        long watermark = ctx.timerService().currentWatermark();
        long eventTime = record.eventTimeMs();
        if (eventTime <= watermark) {
            ctx.output(others, record.toRow(true));
            return;
        }
        RowData r = record.row;
        DriftEvent e = new DriftEvent();
        e.docType = r.getString(SnapshotRecord.DOC_TYPE).toString();
        e.eventTimeMs = eventTime;
        if (deduplicate) {
            long[] hash = IdSet.murmur3x64(r.getString(SnapshotRecord.EVENT_ID).toBytes());
            e.idHigh = hash[0];
            e.idLow = hash[1];
        }
        e.meanDrift = r.getDouble(SnapshotRecord.MEAN_DRIFT);
        e.anchorCount = r.getInt(SnapshotRecord.ANCHOR_COUNT);
        e.disabled = SnapshotRecord.DISABLED.equals(r.getString(SnapshotRecord.SNAPSHOT_STATUS));
        e.resampleCount =
                r.isNullAt(SnapshotRecord.RESAMPLE_COUNT)
                        ? 0
                        : r.getInt(SnapshotRecord.RESAMPLE_COUNT);
        e.maxKlDivergence =
                r.isNullAt(SnapshotRecord.MAX_KL_DIVERGENCE)
                        ? 0.0
                        : r.getDouble(SnapshotRecord.MAX_KL_DIVERGENCE);
        out.collect(e);
    }
}
