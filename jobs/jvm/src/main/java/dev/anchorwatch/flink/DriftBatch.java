package dev.anchorwatch.flink;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.flink.api.common.serialization.SerializerConfig;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeutils.SimpleTypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.base.TypeSerializerSingleton;
import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataOutputView;

/**
 * Valid, on-time events of one doc type from one source task, in the order they were read,
 * each reduced to what its window's figures need: this is what crosses the network from the
 * sources to the window figures, keyed by doc type. A batch, not one record per event,
 * because Flink's per-record costs on an exchange (framing, the key's hash, the record's
 * way through both tasks) cost several times what the window does with an event
 * (docs/benchmarks.md). On the wire: the doc type once, then
 * column after column, each whole: the events' times, their ids' 128-bit hashes ({@link
 * IdSet}) when deduplicating, the five figures, and the breakdown's: which kinds each event
 * has (their figures in one column of entries), its model (an index into the batch's
 * {@link ModelNames}, each name sent once) and its latency.
 *
 * <p>Top anchors are not sent per event. The events of a run (consecutive events of one
 * window, as the window figures take them) send their best five anchors, each with the
 * event it came from: a window's five best are among its runs' five best. A duplicate event
 * the window drops cannot keep a right anchor out of them: within a run only an id's first
 * copy offers anchors, and a later copy's anchors equal those of its first copy, already
 * counted in the same window.
 */
public final class DriftBatch {

    private static final int FIRST_CAPACITY = 16;

    /** breakdown.TOP_ANCHORS_PER_WINDOW: what a run sends at most. */
    static final int TOP_PER_RUN = 5;

    public String docType;
    public boolean withIds;
    public int size;
    public long[] eventTimeMs;
    public long[] idHigh;
    public long[] idLow;
    public double[] meanDrift;
    public int[] anchorCount;
    public boolean[] disabled;
    public int[] resampleCount;
    public double[] maxKlDivergence;

    /** Per event: its kinds (bit 1 << kind), their figures from kindFirst[event] on. */
    public byte[] kindMask;
    /** Per event: where its kinds' entries start (derived from the masks, not sent). */
    public int[] kindFirst;
    public int kindEntries;
    public int[] kindCount;
    public double[] kindMean;
    public double[] kindMax;

    /** Per event: its model's index in {@link #models}, -1 for none (unknown). */
    public short[] model;
    public final ModelNames models = new ModelNames();
    /** Per event: its latency in ms, -1 for none. */
    public int[] latencyMs;

    /** The runs' best anchors, run after run, each run's in order (TopOrder). */
    public int candidates;
    public int[] candEvent = new int[TOP_PER_RUN];
    public long[] candPosition = new long[TOP_PER_RUN];
    public double[] candDrift = new double[TOP_PER_RUN];
    public byte[][] candId = new byte[TOP_PER_RUN][];
    /** The event's id as UTF-8, or null when it is not a contract identifier. */
    public byte[][] candEventId = new byte[TOP_PER_RUN][];

    /**
     * The end (inclusive) of the earliest window among the events (the route's bookkeeping:
     * the batch must reach its window before a watermark at or past this does). Not sent.
     */
    long firstWindowLast = Long.MAX_VALUE;

    /** The current run's window start and first candidate (the route's; not sent). */
    private long runStart;
    private int runFirst;

    DriftBatch(String docType, boolean withIds, int capacity) {
        this.docType = docType;
        this.withIds = withIds;
        eventTimeMs = new long[capacity];
        idHigh = withIds ? new long[capacity] : new long[0];
        idLow = withIds ? new long[capacity] : new long[0];
        meanDrift = new double[capacity];
        anchorCount = new int[capacity];
        disabled = new boolean[capacity];
        resampleCount = new int[capacity];
        maxKlDivergence = new double[capacity];
        kindMask = new byte[capacity];
        kindFirst = new int[capacity];
        kindCount = new int[capacity];
        kindMean = new double[capacity];
        kindMax = new double[capacity];
        model = new short[capacity];
        latencyMs = new int[capacity];
    }

    DriftBatch(String docType, boolean withIds) {
        this(docType, withIds, FIRST_CAPACITY);
    }

    /** This batch emptied, for another doc type (its arrays kept). */
    DriftBatch reset(String newDocType) {
        docType = newDocType;
        size = 0;
        kindEntries = 0;
        models.clear();
        Arrays.fill(candId, 0, candidates, null);
        Arrays.fill(candEventId, 0, candidates, null);
        candidates = 0;
        firstWindowLast = Long.MAX_VALUE;
        return this;
    }

    /**
     * Appends one valid event of window {@code windowStart} ({@code high}, {@code low}: its
     * id's hash, ignored unless {@link #withIds}).
     */
    void add(SnapshotRecord r, long high, long low, long windowStart) {
        if (size == eventTimeMs.length) {
            grow();
        }
        int i = size++;
        eventTimeMs[i] = r.eventTimeMs;
        if (withIds) {
            idHigh[i] = high;
            idLow[i] = low;
        }
        meanDrift[i] = r.meanDrift;
        anchorCount[i] = r.anchorCount;
        disabled[i] = r.isDisabled();
        resampleCount[i] = r.isNullAt(SnapshotRecord.RESAMPLE_COUNT) ? 0 : r.resampleCount;
        maxKlDivergence[i] =
                r.isNullAt(SnapshotRecord.MAX_KL_DIVERGENCE) ? 0.0 : r.maxKlDivergence;
        model[i] = r.hasModel()
                ? (short) models.indexOf(r.text, r.modelFrom, r.modelLength)
                : (short) -1;
        latencyMs[i] = r.latency();
        kindFirst[i] = kindEntries;
        EventBreakdown b = r.breakdown;
        int mask = b == null ? 0 : b.kindMask;
        kindMask[i] = (byte) mask;
        if (mask != 0) {
            addKinds(b, mask);
        }
        if (i == 0 || windowStart != runStart) {
            runStart = windowStart;
            runFirst = candidates;
        }
        if (b != null && b.topCount > 0) {
            offer(i, r, b);
        }
    }

    private void addKinds(EventBreakdown b, int mask) {
        if (kindEntries + EventBreakdown.KIND_COUNT > kindCount.length) {
            int capacity = Math.max(2 * kindCount.length, kindEntries + EventBreakdown.KIND_COUNT);
            kindCount = Arrays.copyOf(kindCount, capacity);
            kindMean = Arrays.copyOf(kindMean, capacity);
            kindMax = Arrays.copyOf(kindMax, capacity);
        }
        int e = kindEntries;
        for (int k = 0; k < EventBreakdown.KIND_COUNT; k++) {
            if ((mask & (1 << k)) != 0) {
                kindCount[e] = b.count[k];
                kindMean[e] = b.mean[k];
                kindMax[e] = b.max[k];
                e++;
            }
        }
        kindEntries = e;
    }

    /** Event i's top anchors into its run's best five. */
    private void offer(int i, SnapshotRecord r, EventBreakdown b) {
        boolean first = true;
        for (int a = 0; a < b.topCount; a++) {
            int held = candidates - runFirst;
            byte[] id = b.topArray[a];
            int from = b.topFrom[a];
            int length = b.topLength[a];
            int at = TopOrder.place(candDrift, candPosition, candId, runFirst, held,
                    b.topDrift[a], b.topPosition[a], id, from, length);
            if (at == TOP_PER_RUN) {
                continue;
            }
            if (first && withIds && isCopy(i)) {
                return;
            }
            first = false;
            insert(runFirst + at, held == TOP_PER_RUN, i, b.topDrift[a], b.topPosition[a],
                    Arrays.copyOfRange(id, from, from + length),
                    EventBreakdown.isIdentifier(r.text, r.idFrom, r.idLength)
                            ? Arrays.copyOfRange(r.text, r.idFrom, r.idFrom + r.idLength)
                            : null);
        }
    }

    /** Whether the run's anchors held already come from a copy of event i (same id). */
    private boolean isCopy(int i) {
        for (int c = runFirst; c < candidates; c++) {
            int e = candEvent[c];
            if (e != i && idHigh[e] == idHigh[i] && idLow[e] == idLow[i]) {
                return true;
            }
        }
        return false;
    }

    private void insert(int at, boolean full, int event, double drift, long position,
            byte[] id, byte[] eventId) {
        int last = full ? runFirst + TOP_PER_RUN - 1 : candidates;
        if (!full) {
            ensureCandidates(candidates + 1);
            candidates++;
        }
        for (int c = last; c > at; c--) {
            candEvent[c] = candEvent[c - 1];
            candPosition[c] = candPosition[c - 1];
            candDrift[c] = candDrift[c - 1];
            candId[c] = candId[c - 1];
            candEventId[c] = candEventId[c - 1];
        }
        candEvent[at] = event;
        candPosition[at] = position;
        candDrift[at] = drift;
        candId[at] = id;
        candEventId[at] = eventId;
    }

    private void ensureCandidates(int n) {
        if (n > candEvent.length) {
            int capacity = Math.max(2 * candEvent.length, n);
            candEvent = Arrays.copyOf(candEvent, capacity);
            candPosition = Arrays.copyOf(candPosition, capacity);
            candDrift = Arrays.copyOf(candDrift, capacity);
            candId = Arrays.copyOf(candId, capacity);
            candEventId = Arrays.copyOf(candEventId, capacity);
        }
    }

    private void grow() {
        int capacity = Math.max(FIRST_CAPACITY, 2 * eventTimeMs.length);
        eventTimeMs = Arrays.copyOf(eventTimeMs, capacity);
        if (withIds) {
            idHigh = Arrays.copyOf(idHigh, capacity);
            idLow = Arrays.copyOf(idLow, capacity);
        }
        meanDrift = Arrays.copyOf(meanDrift, capacity);
        anchorCount = Arrays.copyOf(anchorCount, capacity);
        disabled = Arrays.copyOf(disabled, capacity);
        resampleCount = Arrays.copyOf(resampleCount, capacity);
        maxKlDivergence = Arrays.copyOf(maxKlDivergence, capacity);
        kindMask = Arrays.copyOf(kindMask, capacity);
        kindFirst = Arrays.copyOf(kindFirst, capacity);
        model = Arrays.copyOf(model, capacity);
        latencyMs = Arrays.copyOf(latencyMs, capacity);
    }

    /** The serializer of the exchange: the doc type as modified UTF-8, then the events. */
    public static final class Serializer extends TypeSerializerSingleton<DriftBatch> {

        private static final long serialVersionUID = 1L;

        static final Serializer INSTANCE = new Serializer();

        // Little-endian: the byte order of the machines Flink runs on, so no swapping.
        private static final VarHandle LONGS =
                MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
        private static final VarHandle DOUBLES =
                MethodHandles.byteArrayViewVarHandle(double[].class, ByteOrder.LITTLE_ENDIAN);
        private static final VarHandle INTS =
                MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);
        private static final VarHandle SHORTS =
                MethodHandles.byteArrayViewVarHandle(short[].class, ByteOrder.LITTLE_ENDIAN);

        @Override
        public boolean isImmutableType() {
            return false;
        }

        @Override
        public DriftBatch createInstance() {
            return new DriftBatch("", false, 0);
        }

        @Override
        public DriftBatch copy(DriftBatch from) {
            try {
                org.apache.flink.core.memory.DataOutputSerializer out =
                        new org.apache.flink.core.memory.DataOutputSerializer(256);
                serialize(from, out);
                DriftBatch b = deserialize(
                        new org.apache.flink.core.memory.DataInputDeserializer(
                                out.getSharedBuffer(), 0, out.length()));
                b.firstWindowLast = from.firstWindowLast;
                return b;
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        }

        @Override
        public DriftBatch copy(DriftBatch from, DriftBatch reuse) {
            return copy(from);
        }

        @Override
        public int getLength() {
            return -1;
        }

        @Override
        public void serialize(DriftBatch b, DataOutputView out) throws IOException {
            out.writeUTF(b.docType);
            out.writeBoolean(b.withIds);
            out.writeInt(b.size);
            out.writeInt(b.kindEntries);
            // The columns one after the other in one block, written at once: per event a
            // few array stores instead of a dozen calls into the output view.
            int n = b.size;
            int e = b.kindEntries;
            byte[] block = new byte[n * eventBytes(b.withIds) + e * KIND_BYTES];
            int p = 0;
            for (int i = 0; i < n; i++, p += 8) {
                LONGS.set(block, p, b.eventTimeMs[i]);
            }
            if (b.withIds) {
                for (int i = 0; i < n; i++, p += 16) {
                    LONGS.set(block, p, b.idHigh[i]);
                    LONGS.set(block, p + 8, b.idLow[i]);
                }
            }
            for (int i = 0; i < n; i++, p += 8) {
                DOUBLES.set(block, p, b.meanDrift[i]);
            }
            for (int i = 0; i < n; i++, p += 4) {
                INTS.set(block, p, b.anchorCount[i]);
            }
            for (int i = 0; i < n; i++, p++) {
                block[p] = (byte) (b.disabled[i] ? 1 : 0);
            }
            for (int i = 0; i < n; i++, p += 4) {
                INTS.set(block, p, b.resampleCount[i]);
            }
            for (int i = 0; i < n; i++, p += 8) {
                DOUBLES.set(block, p, b.maxKlDivergence[i]);
            }
            System.arraycopy(b.kindMask, 0, block, p, n);
            p += n;
            for (int i = 0; i < n; i++, p += 2) {
                SHORTS.set(block, p, b.model[i]);
            }
            for (int i = 0; i < n; i++, p += 4) {
                INTS.set(block, p, b.latencyMs[i]);
            }
            for (int i = 0; i < e; i++, p += 4) {
                INTS.set(block, p, b.kindCount[i]);
            }
            for (int i = 0; i < e; i++, p += 8) {
                DOUBLES.set(block, p, b.kindMean[i]);
            }
            for (int i = 0; i < e; i++, p += 8) {
                DOUBLES.set(block, p, b.kindMax[i]);
            }
            out.write(block);
            ModelNames models = b.models;
            out.writeInt(models.count);
            for (int m = 0; m < models.count; m++) {
                WindowBreakdown.writeBytes(out, models.names[m].getBytes(StandardCharsets.UTF_8));
            }
            out.writeInt(b.candidates);
            for (int c = 0; c < b.candidates; c++) {
                out.writeInt(b.candEvent[c]);
                out.writeLong(b.candPosition[c]);
                out.writeDouble(b.candDrift[c]);
                WindowBreakdown.writeBytes(out, b.candId[c]);
                WindowBreakdown.writeBytes(out, b.candEventId[c]);
            }
        }

        @Override
        public DriftBatch deserialize(DataInputView in) throws IOException {
            String docType = in.readUTF();
            boolean withIds = in.readBoolean();
            int n = in.readInt();
            int e = in.readInt();
            byte[] block = new byte[n * eventBytes(withIds) + e * KIND_BYTES];
            in.readFully(block);
            DriftBatch b = new DriftBatch(docType, withIds, n);
            int p = 0;
            for (int i = 0; i < n; i++, p += 8) {
                b.eventTimeMs[i] = (long) LONGS.get(block, p);
            }
            if (withIds) {
                for (int i = 0; i < n; i++, p += 16) {
                    b.idHigh[i] = (long) LONGS.get(block, p);
                    b.idLow[i] = (long) LONGS.get(block, p + 8);
                }
            }
            for (int i = 0; i < n; i++, p += 8) {
                b.meanDrift[i] = (double) DOUBLES.get(block, p);
            }
            for (int i = 0; i < n; i++, p += 4) {
                b.anchorCount[i] = (int) INTS.get(block, p);
            }
            for (int i = 0; i < n; i++, p++) {
                b.disabled[i] = block[p] != 0;
            }
            for (int i = 0; i < n; i++, p += 4) {
                b.resampleCount[i] = (int) INTS.get(block, p);
            }
            for (int i = 0; i < n; i++, p += 8) {
                b.maxKlDivergence[i] = (double) DOUBLES.get(block, p);
            }
            System.arraycopy(block, p, b.kindMask, 0, n);
            p += n;
            for (int i = 0, first = 0; i < n; i++) {
                b.kindFirst[i] = first;
                first += Integer.bitCount(b.kindMask[i] & 0xFF);
            }
            for (int i = 0; i < n; i++, p += 2) {
                b.model[i] = (short) SHORTS.get(block, p);
            }
            for (int i = 0; i < n; i++, p += 4) {
                b.latencyMs[i] = (int) INTS.get(block, p);
            }
            if (e > b.kindCount.length) {
                b.kindCount = new int[e];
                b.kindMean = new double[e];
                b.kindMax = new double[e];
            }
            for (int i = 0; i < e; i++, p += 4) {
                b.kindCount[i] = (int) INTS.get(block, p);
            }
            for (int i = 0; i < e; i++, p += 8) {
                b.kindMean[i] = (double) DOUBLES.get(block, p);
            }
            for (int i = 0; i < e; i++, p += 8) {
                b.kindMax[i] = (double) DOUBLES.get(block, p);
            }
            b.kindEntries = e;
            b.size = n;
            int models = in.readInt();
            b.models.names = new String[Math.max(models, 1)];
            for (int m = 0; m < models; m++) {
                b.models.names[m] = new String(WindowBreakdown.readBytes(in), StandardCharsets.UTF_8);
            }
            b.models.count = models;
            int candidates = in.readInt();
            b.ensureCandidates(candidates);
            for (int c = 0; c < candidates; c++) {
                b.candEvent[c] = in.readInt();
                b.candPosition[c] = in.readLong();
                b.candDrift[c] = in.readDouble();
                b.candId[c] = WindowBreakdown.readBytes(in);
                b.candEventId[c] = WindowBreakdown.readBytes(in);
            }
            b.candidates = candidates;
            return b;
        }

        /**
         * Bytes per event in the block: time, ids, drift, anchors, disabled, resamples, KL,
         * kinds, model, latency.
         */
        private static int eventBytes(boolean withIds) {
            return 8 + (withIds ? 16 : 0) + 8 + 4 + 1 + 4 + 8 + 1 + 2 + 4;
        }

        /** Bytes per kinds entry: count, mean, max. */
        private static final int KIND_BYTES = 4 + 8 + 8;

        @Override
        public DriftBatch deserialize(DriftBatch reuse, DataInputView in) throws IOException {
            return deserialize(in);
        }

        @Override
        public void copy(DataInputView in, DataOutputView out) throws IOException {
            serialize(deserialize(in), out);
        }

        @Override
        public TypeSerializerSnapshot<DriftBatch> snapshotConfiguration() {
            return new Snapshot();
        }

        /** Serializer snapshot (no configuration to keep). */
        public static final class Snapshot extends SimpleTypeSerializerSnapshot<DriftBatch> {
            public Snapshot() {
                super(() -> INSTANCE);
            }
        }
    }

    /** Type information with {@link Serializer}. */
    public static final class Info extends TypeInformation<DriftBatch> {

        private static final long serialVersionUID = 1L;

        @Override
        public boolean isBasicType() {
            return false;
        }

        @Override
        public boolean isTupleType() {
            return false;
        }

        @Override
        public int getArity() {
            return 1;
        }

        @Override
        public int getTotalFields() {
            return 1;
        }

        @Override
        public Class<DriftBatch> getTypeClass() {
            return DriftBatch.class;
        }

        @Override
        public boolean isKeyType() {
            return false;
        }

        @Override
        public TypeSerializer<DriftBatch> createSerializer(SerializerConfig config) {
            return Serializer.INSTANCE;
        }

        @Override
        public String toString() {
            return "DriftBatch";
        }

        @Override
        public boolean equals(Object obj) {
            return obj instanceof Info;
        }

        @Override
        public int hashCode() {
            return Info.class.hashCode();
        }

        @Override
        public boolean canEqual(Object obj) {
            return obj instanceof Info;
        }
    }
}
