package dev.anchorwatch.flink;

import java.util.HashMap;
import java.util.Map;

import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.runtime.state.internal.InternalValueState;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.InternalTimer;
import org.apache.flink.streaming.api.operators.InternalTimerService;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.operators.Triggerable;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;

/**
 * Keyed by doc type: the figures of each tumbling event-time window ({@link
 * WindowFigures.Accumulator}, each event id once when deduplicating), emitted as one row when
 * the watermark passes the window's end, as Flink's window aggregation would.
 *
 * <p>The windows being counted live in a plain map between checkpoints and go into keyed state
 * just before each barrier, so an event costs a map lookup, never a state read: with RocksDB
 * a window is read and written once per checkpoint, not once per event; with the heap
 * backend the state holds the same object, copied once if it changes while a checkpoint is
 * being written.
 *
 * <p>An event whose window has already fired here (its source was idle while others moved
 * the watermark on, then sent it) is not dropped silently: it is tallied late per doc type,
 * each id once, and the tally goes out as one late row every {@code lateReportMs} and before
 * each checkpoint barrier (so a restart neither loses nor repeats it).
 */
final class WindowFiguresOperator extends AbstractStreamOperator<Row>
        implements OneInputStreamOperator<DriftBatch, Row>, Triggerable<String, Long> {

    private static final long serialVersionUID = 1L;

    private final long windowSizeMs;
    private final boolean deduplicate;
    private final long lateReportMs;

    private transient InternalTimerService<Long> windowEnds;
    private transient InternalValueState<String, Long, WindowFigures.Accumulator> stored;
    /** Windows touched since the last checkpoint: doc type -> window start -> figures. */
    private transient Map<String, Map<Long, WindowFigures.Accumulator>> counting;
    /** Events that found their window fired, per doc type, since the last report. */
    private transient Map<String, IdSet> late;

    private transient Map<String, Long> lateCounts;

    WindowFiguresOperator(long windowSizeMs, boolean deduplicate, long lateReportMs) {
        this.windowSizeMs = windowSizeMs;
        this.deduplicate = deduplicate;
        this.lateReportMs = lateReportMs;
    }

    @Override
    @SuppressWarnings("unchecked")
    public void open() throws Exception {
        super.open();
        windowEnds = getInternalTimerService("window-ends", LongSerializer.INSTANCE, this);
        stored =
                (InternalValueState<String, Long, WindowFigures.Accumulator>)
                        getOrCreateKeyedState(
                                LongSerializer.INSTANCE,
                                new ValueStateDescriptor<>(
                                        "window-figures", AccumulatorSerializer.INSTANCE));
        counting = new HashMap<>();
        late = new HashMap<>();
        lateCounts = new HashMap<>();
        scheduleLateReport();
    }

    private void scheduleLateReport() {
        long now = getProcessingTimeService().getCurrentProcessingTime();
        getProcessingTimeService()
                .registerTimer(
                        now - Math.floorMod(now, lateReportMs) + lateReportMs,
                        time -> {
                            reportLate();
                            scheduleLateReport();
                        });
    }

    private void reportLate() {
        for (Map.Entry<String, Long> tally : lateCounts.entrySet()) {
            output.collect(new StreamRecord<>(DriftFront.lateRow(tally.getKey(), tally.getValue())));
        }
        lateCounts.clear();
        late.clear();
    }

    @Override
    public void processElement(StreamRecord<DriftBatch> element) throws Exception {
        DriftBatch b = element.getValue();
        String docType = (String) getCurrentKey();
        long watermark = windowEnds.currentWatermark();
        // The events of a batch mostly share a window: look it up once per run of them.
        long start = Long.MIN_VALUE;
        WindowFigures.Accumulator acc = null;
        for (int i = 0; i < b.size; i++) {
            long eventTime = b.eventTimeMs[i];
            long eventStart = windowStart(eventTime, windowSizeMs);
            long last = eventStart + windowSizeMs - 1;
            if (last <= watermark) {
                if (!deduplicate
                        || late.computeIfAbsent(docType, k -> new IdSet())
                                .addHash(b.idHigh[i], b.idLow[i])) {
                    lateCounts.merge(docType, 1L, Long::sum);
                }
                continue;
            }
            if (acc == null || eventStart != start) {
                start = eventStart;
                acc = open(docType, start, last);
            }
            if (deduplicate && !acc.ids.addHash(b.idHigh[i], b.idLow[i])) {
                continue;
            }
            acc.add(b.meanDrift[i], b.anchorCount[i], b.disabled[i], b.resampleCount[i],
                    b.maxKlDivergence[i]);
        }
    }

    /** Where the tumbling window of an event time starts (its end: start + size - 1). */
    static long windowStart(long eventTimeMs, long windowSizeMs) {
        return eventTimeMs - Math.floorMod(eventTimeMs, windowSizeMs);
    }

    /** The figures of the doc type's window that starts at {@code start}, being counted. */
    private WindowFigures.Accumulator open(String docType, long start, long last)
            throws Exception {
        Map<Long, WindowFigures.Accumulator> open =
                counting.computeIfAbsent(docType, k -> new HashMap<>(4));
        WindowFigures.Accumulator acc = open.get(start);
        if (acc == null) {
            stored.setCurrentNamespace(start);
            acc = stored.value();
            if (acc == null) {
                acc = new WindowFigures.Accumulator();
                windowEnds.registerEventTimeTimer(start, last);
            }
            open.put(start, acc);
        }
        return acc;
    }

    @Override
    public void onEventTime(InternalTimer<String, Long> timer) throws Exception {
        String docType = timer.getKey();
        long start = timer.getNamespace();
        WindowFigures.Accumulator acc = null;
        Map<Long, WindowFigures.Accumulator> open = counting.get(docType);
        if (open != null) {
            acc = open.remove(start);
            if (open.isEmpty()) {
                counting.remove(docType);
            }
        }
        stored.setCurrentNamespace(start);
        if (acc == null) {
            acc = stored.value();
        }
        stored.clear();
        if (acc != null && acc.count > 0) {
            output.collect(
                    new StreamRecord<>(
                            // The timer's own time: right even for a window restored
                            // from a job that had another window size.
                            DriftFront.windowRow(
                                    docType, start, timer.getTimestamp() + 1,
                                    WindowFigures.figures(acc))));
        }
    }

    @Override
    public void onProcessingTime(InternalTimer<String, Long> timer) {}

    @Override
    public void finish() throws Exception {
        reportLate();
        super.finish();
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        super.prepareSnapshotPreBarrier(checkpointId);
        reportLate();
        for (Map.Entry<String, Map<Long, WindowFigures.Accumulator>> type : counting.entrySet()) {
            setCurrentKey(type.getKey());
            for (Map.Entry<Long, WindowFigures.Accumulator> w : type.getValue().entrySet()) {
                stored.setCurrentNamespace(w.getKey());
                stored.update(w.getValue());
            }
        }
        // The heap backend now holds these objects for the snapshot: read them back through
        // the state (which copies one changed during the snapshot) rather than change them.
        counting.clear();
    }
}
