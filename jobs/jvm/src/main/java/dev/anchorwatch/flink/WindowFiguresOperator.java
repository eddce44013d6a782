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
 * WindowFigures.Accumulator}, each event id once when deduplicating) and its breakdown
 * ({@link WindowBreakdown}: kinds, top anchors, models, latency, of the same events),
 * emitted as one row when the watermark passes the window's end, as Flink's window
 * aggregation would.
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

    /** Doc types whose last window's id count is kept, at most. */
    static final int MAX_SIZE_HINTS = 65_536;

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

    /** Ids in each doc type's last fired window: how big to make its next window's set. */
    private transient Map<String, Integer> lastWindowIds;

    /** Counts a batch's runs into their windows. */
    private transient RunCounter runs;

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
        lastWindowIds = new HashMap<>();
        runs = new RunCounter(deduplicate);
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
        runs.startBatch(b);
        // The events of a batch mostly share a window: taken a run of one window at a time.
        int i = 0;
        int candidate = 0;
        while (i < b.size) {
            long start = windowStart(b.eventTimeMs[i], windowSizeMs);
            long last = start + windowSizeMs - 1;
            int end = i + 1;
            while (end < b.size && b.eventTimeMs[end] >= start && b.eventTimeMs[end] <= last) {
                end++;
            }
            if (last <= watermark) {
                tallyLate(docType, b, i, end, runs.fresh);
                candidate = RunCounter.skip(b, candidate, end);
            } else {
                candidate = runs.count(open(docType, start, last), b, i, end, candidate);
            }
            i = end;
        }
    }

    /** Events [from, to) of the batch, whose window has fired: tallied late, each id once. */
    private void tallyLate(String docType, DriftBatch b, int from, int to, boolean[] fresh) {
        long count = deduplicate
                ? late.computeIfAbsent(docType, k -> new IdSet())
                        .addHashes(b.idHigh, b.idLow, from, to, fresh)
                : to - from;
        if (count > 0) {
            lateCounts.merge(docType, count, Long::sum);
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
                acc.breakdown = new WindowBreakdown();
                if (deduplicate) {
                    // Sized for as many ids as the type's last window had: the set then
                    // rarely grows, and each growth re-inserts every id (a cache miss each).
                    acc.ids = IdSet.withCapacity(lastWindowIds.getOrDefault(docType, 0));
                }
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
        if (acc != null && deduplicate) {
            // Only a hint: dropped whole rather than grow with every doc type ever seen.
            if (lastWindowIds.size() >= MAX_SIZE_HINTS) {
                lastWindowIds.clear();
            }
            lastWindowIds.put(docType, acc.ids.size);
        }
        if (acc != null && acc.count > 0) {
            output.collect(
                    new StreamRecord<>(
                            // The timer's own time: right even for a window restored
                            // from a job that had another window size.
                            DriftFront.windowRow(
                                    docType, start, timer.getTimestamp() + 1,
                                    WindowFigures.figures(acc),
                                    acc.breakdown == null ? null : acc.breakdown.toJson())));
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
