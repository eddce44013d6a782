package dev.anchorwatch.flink;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
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
 * IdSet}) when deduplicating, and the five figures.
 */
public final class DriftBatch {

    private static final int FIRST_CAPACITY = 16;

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

    /**
     * The end (inclusive) of the earliest window among the events (the route's bookkeeping:
     * the batch must reach its window before a watermark at or past this does). Not sent.
     */
    long firstWindowLast = Long.MAX_VALUE;

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
    }

    DriftBatch(String docType, boolean withIds) {
        this(docType, withIds, FIRST_CAPACITY);
    }

    /** This batch emptied, for another doc type (its arrays kept). */
    DriftBatch reset(String newDocType) {
        docType = newDocType;
        size = 0;
        firstWindowLast = Long.MAX_VALUE;
        return this;
    }

    /** Appends one event ({@code idHigh}, {@code idLow} ignored unless {@link #withIds}). */
    void add(long eventTime, long high, long low, double drift, int anchors, boolean isDisabled,
            int resamples, double klDivergence) {
        if (size == eventTimeMs.length) {
            grow();
        }
        int i = size++;
        eventTimeMs[i] = eventTime;
        if (withIds) {
            idHigh[i] = high;
            idLow[i] = low;
        }
        meanDrift[i] = drift;
        anchorCount[i] = anchors;
        disabled[i] = isDisabled;
        resampleCount[i] = resamples;
        maxKlDivergence[i] = klDivergence;
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
            DriftBatch b = new DriftBatch(from.docType, from.withIds, from.size);
            for (int i = 0; i < from.size; i++) {
                b.add(from.eventTimeMs[i],
                        from.withIds ? from.idHigh[i] : 0,
                        from.withIds ? from.idLow[i] : 0,
                        from.meanDrift[i], from.anchorCount[i], from.disabled[i],
                        from.resampleCount[i], from.maxKlDivergence[i]);
            }
            b.firstWindowLast = from.firstWindowLast;
            return b;
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
            // The columns one after the other in one block, written at once: per event a
            // few array stores instead of eight calls into the output view.
            int n = b.size;
            byte[] block = new byte[n * eventBytes(b.withIds)];
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
            out.write(block);
        }

        @Override
        public DriftBatch deserialize(DataInputView in) throws IOException {
            String docType = in.readUTF();
            boolean withIds = in.readBoolean();
            int n = in.readInt();
            byte[] block = new byte[n * eventBytes(withIds)];
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
            b.size = n;
            return b;
        }

        /** Bytes per event in the block: time, ids, drift, anchors, disabled, resamples, KL. */
        private static int eventBytes(boolean withIds) {
            return 8 + (withIds ? 16 : 0) + 8 + 4 + 1 + 4 + 8;
        }

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
