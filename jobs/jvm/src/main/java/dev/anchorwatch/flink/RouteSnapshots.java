package dev.anchorwatch.flink;

import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.types.Row;
import org.apache.flink.util.OutputTag;

/**
 * Chained to the source: collects each valid event that the watermark has not passed into
 * its doc type's {@link DriftBatch} for the window figures, and sends everything else
 * (invalid records, late events) to the side output ({@link DriftFront#getOthers}) as a row
 * for the job's SQL, which names the reason of a dead letter and tallies the late events.
 * Late is decided as SQL's CURRENT_WATERMARK does here: the event time is at or behind the
 * last watermark this task passed on.
 *
 * <p>A batch goes out when it is full, and always before anything that could make its
 * events late downstream or lose them: before a watermark that reaches the end of one of its
 * windows, before this task turns idle (the others' watermark then moves on without it),
 * before a checkpoint barrier (so the operator keeps no state), and at the end of input. The
 * events buffered across all doc types are bounded too.
 */
final class RouteSnapshots extends AbstractStreamOperator<DriftBatch>
        implements OneInputStreamOperator<SnapshotRecord, DriftBatch> {

    private static final long serialVersionUID = 1L;

    /** Events per batch: enough to spread the exchange's per-record cost thin. */
    static final int BATCH_EVENTS = 512;

    /** Events buffered in the task across doc types, at most (10,000 types stay bounded). */
    static final int BUFFERED_EVENTS = 16_384;

    /**
     * Sent batches kept to be filled again (their arrays grown already), at most this many,
     * so that many doc types stay bounded too.
     */
    static final int SPARE_BATCHES = 8;

    private final OutputTag<Row> others;
    private final boolean deduplicate;
    private final long windowSizeMs;
    private final int maxIdChars;
    private final int maxDocTypeChars;

    private transient Map<DocTypeKey, DriftBatch> batches;
    private transient ArrayDeque<DriftBatch> spare;
    /** The key looked up for each event, refilled rather than allocated. */
    private transient DocTypeKey probe;
    private transient int buffered;
    /** The earliest window end among the buffered events. */
    private transient long firstWindowLast;

    private transient long watermark;
    private transient StreamRecord<DriftBatch> outgoing;
    private transient Counter routed;

    RouteSnapshots(OutputTag<Row> others, boolean deduplicate, long windowSizeMs,
            int maxIdChars, int maxDocTypeChars) {
        this.others = others;
        this.deduplicate = deduplicate;
        this.windowSizeMs = windowSizeMs;
        this.maxIdChars = maxIdChars;
        this.maxDocTypeChars = maxDocTypeChars;
    }

    @Override
    public void open() throws Exception {
        super.open();
        batches = new HashMap<>();
        spare = new ArrayDeque<>(SPARE_BATCHES);
        probe = new DocTypeKey();
        firstWindowLast = Long.MAX_VALUE;
        watermark = Long.MIN_VALUE;
        outgoing = new StreamRecord<>(null);
        // Every record this operator has taken in, batched or not (tests wait on it).
        routed = getMetricGroup().counter("snapshotsRouted");
    }

    @Override
    public void processElement(StreamRecord<SnapshotRecord> element) throws Exception {
        routed.inc();
        SnapshotRecord record = element.getValue();
        if (!record.isValid(maxIdChars, maxDocTypeChars)) {
            output.collect(others, aside(element, record.toRow(false)));
            return;
        }
        long eventTime = record.eventTimeMs();
        if (eventTime <= watermark) {
            output.collect(others, aside(element, record.toRow(true)));
            return;
        }
        byte[] text = record.text;
        DriftBatch batch =
                batches.get(probe.of(text, record.docTypeFrom, record.docTypeLength));
        if (batch == null) {
            batch = spare.isEmpty()
                    ? new DriftBatch(record.docType(), deduplicate)
                    : spare.pop().reset(record.docType());
            batches.put(probe.copy(), batch);
        }
        long high = 0;
        long low = 0;
        if (deduplicate) {
            long[] hash = IdSet.murmur3x64(text, record.idFrom, record.idLength);
            high = hash[0];
            low = hash[1];
        }
        long start = WindowFiguresOperator.windowStart(eventTime, windowSizeMs);
        batch.add(record, high, low, start);
        long last = start + windowSizeMs - 1;
        batch.firstWindowLast = Math.min(batch.firstWindowLast, last);
        firstWindowLast = Math.min(firstWindowLast, last);
        buffered++;
        if (batch.size >= BATCH_EVENTS) {
            batches.remove(probe);
            send(batch);
        } else if (buffered >= BUFFERED_EVENTS) {
            sendAll();
        }
    }

    @Override
    public void processWatermark(Watermark mark) throws Exception {
        long time = mark.getTimestamp();
        if (time >= firstWindowLast) {
            long remaining = Long.MAX_VALUE;
            Iterator<DriftBatch> it = batches.values().iterator();
            while (it.hasNext()) {
                DriftBatch batch = it.next();
                if (batch.firstWindowLast <= time) {
                    it.remove();
                    send(batch);
                } else {
                    remaining = Math.min(remaining, batch.firstWindowLast);
                }
            }
            firstWindowLast = remaining;
        }
        watermark = time;
        super.processWatermark(mark);
    }

    @Override
    public void processWatermarkStatus(WatermarkStatus status) throws Exception {
        if (status.isIdle()) {
            sendAll();
        }
        super.processWatermarkStatus(status);
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        sendAll();
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void finish() throws Exception {
        sendAll();
        super.finish();
    }

    /** The row for the side output, with the record's timestamp as a process function's. */
    private static StreamRecord<Row> aside(StreamRecord<SnapshotRecord> element, Row row) {
        return element.hasTimestamp()
                ? new StreamRecord<>(row, element.getTimestamp())
                : new StreamRecord<>(row);
    }

    private void sendAll() {
        for (DriftBatch batch : batches.values()) {
            send(batch);
        }
        batches.clear();
        firstWindowLast = Long.MAX_VALUE;
    }

    private void send(DriftBatch batch) {
        buffered -= batch.size;
        output.collect(outgoing.replace(batch));
        // The keyed exchange has serialised the batch by now (nothing is chained after this
        // operator: its batches only cross the exchange), so its arrays can serve again.
        if (spare.size() < SPARE_BATCHES) {
            spare.push(batch);
        }
    }

    /**
     * A doc type's UTF-8 bytes as a map key: hashed and compared as bytes, cheaper per event
     * than a string data's general-purpose hash and comparison over memory segments.
     */
    static final class DocTypeKey {
        private byte[] bytes;
        private int from;
        private int length;
        private int hash;

        /** This key, now for these bytes (not copied: the caller keeps them unchanged). */
        DocTypeKey of(byte[] array, int from, int length) {
            this.bytes = array;
            this.from = from;
            this.length = length;
            int h = 1;
            for (int i = from; i < from + length; i++) {
                h = 31 * h + bytes[i];
            }
            hash = h;
            return this;
        }

        /** A key of its own for the map, with a copy of the bytes. */
        DocTypeKey copy() {
            DocTypeKey key = new DocTypeKey();
            key.bytes = Arrays.copyOfRange(bytes, from, from + length);
            key.length = length;
            key.hash = hash;
            return key;
        }

        @Override
        public int hashCode() {
            return hash;
        }

        @Override
        public boolean equals(Object other) {
            if (!(other instanceof DocTypeKey)) {
                return false;
            }
            DocTypeKey o = (DocTypeKey) other;
            return o.hash == hash
                    && Arrays.equals(o.bytes, o.from, o.from + o.length,
                            bytes, from, from + length);
        }
    }
}
