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
 * the watermark on, then sent it) is not dropped silently: it goes out as a late row of one.
 */
final class WindowFiguresOperator extends AbstractStreamOperator<Row>
        implements OneInputStreamOperator<DriftEvent, Row>, Triggerable<String, Long> {

    private static final long serialVersionUID = 1L;

    private final long windowSizeMs;
    private final boolean deduplicate;

    private transient InternalTimerService<Long> windowEnds;
    private transient InternalValueState<String, Long, WindowFigures.Accumulator> stored;
    /** Windows touched since the last checkpoint: doc type -> window start -> figures. */
    private transient Map<String, Map<Long, WindowFigures.Accumulator>> counting;

    WindowFiguresOperator(long windowSizeMs, boolean deduplicate) {
        this.windowSizeMs = windowSizeMs;
        this.deduplicate = deduplicate;
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
    }

    @Override
    public void processElement(StreamRecord<DriftEvent> element) throws Exception {
        DriftEvent e = element.getValue();
        long start = e.eventTimeMs - Math.floorMod(e.eventTimeMs, windowSizeMs);
        long last = start + windowSizeMs - 1;
        String docType = (String) getCurrentKey();
        if (last <= windowEnds.currentWatermark()) {
            output.collect(new StreamRecord<>(DriftFront.lateRow(docType, 1)));
            return;
        }
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
        if (deduplicate && !acc.ids.addHash(e.idHigh, e.idLow)) {
            return;
        }
        acc.add(e.meanDrift, e.anchorCount, e.disabled, e.resampleCount, e.maxKlDivergence);
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
                            DriftFront.windowRow(
                                    docType, start, start + windowSizeMs,
                                    WindowFigures.figures(acc))));
        }
    }

    @Override
    public void onProcessingTime(InternalTimer<String, Long> timer) {}

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        super.prepareSnapshotPreBarrier(checkpointId);
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
