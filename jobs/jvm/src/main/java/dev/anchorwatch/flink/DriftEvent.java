package dev.anchorwatch.flink;

import java.io.IOException;

import org.apache.flink.api.common.serialization.SerializerConfig;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeutils.SimpleTypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.base.TypeSerializerSingleton;
import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataOutputView;

/**
 * A valid, on-time event reduced to what its window's figures need: this is what crosses
 * the network from the sources to the window figures (about 60 bytes instead of a row of
 * strings), keyed by doc type. The event id travels as its 128-bit hash ({@link IdSet}).
 */
public final class DriftEvent {

    public String docType;
    public long eventTimeMs;
    public long idHigh;
    public long idLow;
    public double meanDrift;
    public int anchorCount;
    public boolean disabled;
    public int resampleCount;
    public double maxKlDivergence;

    /** The serializer of the exchange: fields in order, the doc type as modified UTF-8. */
    public static final class Serializer extends TypeSerializerSingleton<DriftEvent> {

        private static final long serialVersionUID = 1L;

        static final Serializer INSTANCE = new Serializer();

        @Override
        public boolean isImmutableType() {
            return false;
        }

        @Override
        public DriftEvent createInstance() {
            return new DriftEvent();
        }

        @Override
        public DriftEvent copy(DriftEvent from) {
            DriftEvent e = new DriftEvent();
            e.docType = from.docType;
            e.eventTimeMs = from.eventTimeMs;
            e.idHigh = from.idHigh;
            e.idLow = from.idLow;
            e.meanDrift = from.meanDrift;
            e.anchorCount = from.anchorCount;
            e.disabled = from.disabled;
            e.resampleCount = from.resampleCount;
            e.maxKlDivergence = from.maxKlDivergence;
            return e;
        }

        @Override
        public DriftEvent copy(DriftEvent from, DriftEvent reuse) {
            return copy(from);
        }

        @Override
        public int getLength() {
            return -1;
        }

        @Override
        public void serialize(DriftEvent e, DataOutputView out) throws IOException {
            out.writeUTF(e.docType);
            out.writeLong(e.eventTimeMs);
            out.writeLong(e.idHigh);
            out.writeLong(e.idLow);
            out.writeDouble(e.meanDrift);
            out.writeInt(e.anchorCount);
            out.writeBoolean(e.disabled);
            out.writeInt(e.resampleCount);
            out.writeDouble(e.maxKlDivergence);
        }

        @Override
        public DriftEvent deserialize(DataInputView in) throws IOException {
            DriftEvent e = new DriftEvent();
            e.docType = in.readUTF();
            e.eventTimeMs = in.readLong();
            e.idHigh = in.readLong();
            e.idLow = in.readLong();
            e.meanDrift = in.readDouble();
            e.anchorCount = in.readInt();
            e.disabled = in.readBoolean();
            e.resampleCount = in.readInt();
            e.maxKlDivergence = in.readDouble();
            return e;
        }

        @Override
        public DriftEvent deserialize(DriftEvent reuse, DataInputView in) throws IOException {
            return deserialize(in);
        }

        @Override
        public void copy(DataInputView in, DataOutputView out) throws IOException {
            serialize(deserialize(in), out);
        }

        @Override
        public TypeSerializerSnapshot<DriftEvent> snapshotConfiguration() {
            return new Snapshot();
        }

        /** Serializer snapshot (no configuration to keep). */
        public static final class Snapshot extends SimpleTypeSerializerSnapshot<DriftEvent> {
            public Snapshot() {
                super(() -> INSTANCE);
            }
        }
    }

    /** Type information with {@link Serializer}. */
    public static final class Info extends TypeInformation<DriftEvent> {

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
        public Class<DriftEvent> getTypeClass() {
            return DriftEvent.class;
        }

        @Override
        public boolean isKeyType() {
            return false;
        }

        @Override
        public TypeSerializer<DriftEvent> createSerializer(SerializerConfig config) {
            return Serializer.INSTANCE;
        }

        @Override
        public String toString() {
            return "DriftEvent";
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
