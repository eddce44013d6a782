package dev.anchorwatch.flink;

import java.io.IOException;

import org.apache.flink.api.common.typeutils.SimpleTypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.base.TypeSerializerSingleton;
import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataOutputView;

/**
 * A window's running figures in state and checkpoints: the sums, the drift steps that were
 * hit (step, count), the ids as their hashes only (16 bytes each, not the table with its
 * empty slots), then its breakdown ({@link WindowBreakdown}) if it has one. Written field by
 * field straight to the checkpoint stream, so a window of millions of ids needs no buffer
 * of its size on the heap (the hashmap backend). Format 1 (before the breakdown) is still
 * read: such a window fires without a breakdown, which its events before the restore were
 * never counted into.
 */
public final class AccumulatorSerializer
        extends TypeSerializerSingleton<WindowFigures.Accumulator> {

    private static final long serialVersionUID = 1L;

    static final AccumulatorSerializer INSTANCE = new AccumulatorSerializer();

    @Override
    public boolean isImmutableType() {
        return false;
    }

    @Override
    public WindowFigures.Accumulator createInstance() {
        return new WindowFigures.Accumulator();
    }

    @Override
    public WindowFigures.Accumulator copy(WindowFigures.Accumulator from) {
        WindowFigures.Accumulator to = new WindowFigures.Accumulator();
        to.count = from.count;
        to.sum = from.sum;
        to.sumOfSquares = from.sumOfSquares;
        to.max = from.max;
        to.steps = from.steps == null ? null : from.steps.clone();
        to.anchors = from.anchors;
        to.disabled = from.disabled;
        to.zeroAnchors = from.zeroAnchors;
        to.resamples = from.resamples;
        to.klSum = from.klSum;
        to.ids = from.ids.copy();
        to.breakdown = from.breakdown == null ? null : from.breakdown.copy();
        return to;
    }

    @Override
    public WindowFigures.Accumulator copy(
            WindowFigures.Accumulator from, WindowFigures.Accumulator reuse) {
        return copy(from);
    }

    @Override
    public int getLength() {
        return -1;
    }

    /**
     * The layout written below; a reader refuses any other (but 1, the same without the
     * breakdown) rather than misread it.
     */
    private static final int FORMAT = 2;

    @Override
    public void serialize(WindowFigures.Accumulator acc, DataOutputView out) throws IOException {
        out.writeByte(FORMAT);
        out.writeLong(acc.count);
        out.writeDouble(acc.sum);
        out.writeDouble(acc.sumOfSquares);
        out.writeDouble(acc.max);
        out.writeLong(acc.anchors);
        out.writeLong(acc.disabled);
        out.writeLong(acc.zeroAnchors);
        out.writeLong(acc.resamples);
        out.writeDouble(acc.klSum);
        int[] steps = acc.steps;
        if (steps == null) {
            out.writeInt(-1);
        } else {
            int hit = 0;
            for (int c : steps) {
                hit += c == 0 ? 0 : 1;
            }
            out.writeInt(hit);
            for (int i = 0; i < steps.length; i++) {
                if (steps[i] != 0) {
                    out.writeShort(i);
                    out.writeInt(steps[i]);
                }
            }
        }
        IdSet ids = acc.ids;
        out.writeInt(ids.size);
        long[] slots = ids.slots;
        for (int i = 0; i < slots.length; i += 2) {
            if (slots[i] != 0 || slots[i + 1] != 0) {
                out.writeLong(slots[i]);
                out.writeLong(slots[i + 1]);
            }
        }
        out.writeBoolean(acc.breakdown != null);
        if (acc.breakdown != null) {
            acc.breakdown.write(out);
        }
    }

    @Override
    public WindowFigures.Accumulator deserialize(DataInputView in) throws IOException {
        int format = in.readByte();
        if (format != FORMAT && format != 1) {
            throw new IOException(
                    "window figures in state have format " + format + ", this job reads "
                            + FORMAT + ": restore with the job version that wrote them");
        }
        WindowFigures.Accumulator acc = new WindowFigures.Accumulator();
        acc.count = in.readLong();
        acc.sum = in.readDouble();
        acc.sumOfSquares = in.readDouble();
        acc.max = in.readDouble();
        acc.anchors = in.readLong();
        acc.disabled = in.readLong();
        acc.zeroAnchors = in.readLong();
        acc.resamples = in.readLong();
        acc.klSum = in.readDouble();
        int hit = in.readInt();
        if (hit >= 0) {
            acc.steps = new int[WindowFigures.STEPS + 1];
            for (int i = 0; i < hit; i++) {
                int step = in.readShort();
                acc.steps[step] = in.readInt();
            }
        }
        int size = in.readInt();
        IdSet ids = IdSet.withCapacity(size);
        for (int i = 0; i < size; i++) {
            ids.addHash(in.readLong(), in.readLong());
        }
        acc.ids = ids;
        if (format == FORMAT && in.readBoolean()) {
            acc.breakdown = WindowBreakdown.read(in);
        }
        return acc;
    }

    @Override
    public WindowFigures.Accumulator deserialize(
            WindowFigures.Accumulator reuse, DataInputView in) throws IOException {
        return deserialize(in);
    }

    @Override
    public void copy(DataInputView in, DataOutputView out) throws IOException {
        serialize(deserialize(in), out);
    }

    @Override
    public TypeSerializerSnapshot<WindowFigures.Accumulator> snapshotConfiguration() {
        return new Snapshot();
    }

    /** Serializer snapshot (no configuration to keep). */
    public static final class Snapshot
            extends SimpleTypeSerializerSnapshot<WindowFigures.Accumulator> {
        public Snapshot() {
            super(() -> INSTANCE);
        }
    }
}
