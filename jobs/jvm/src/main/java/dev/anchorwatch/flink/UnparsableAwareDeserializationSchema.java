package dev.anchorwatch.flink;

import java.io.IOException;
import java.nio.charset.StandardCharsets;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.utils.JoinedRowData;
import org.apache.flink.util.Collector;

/**
 * Wraps a JSON decoder that skips what it cannot read: a decoded row gets a NULL payload
 * column appended; a record the decoder skipped becomes a row of NULLs with the record's
 * text (invalid UTF-8 replaced) as payload. Nothing read is lost.
 */
final class UnparsableAwareDeserializationSchema implements DeserializationSchema<RowData> {

    private static final long serialVersionUID = 1L;

    private final DeserializationSchema<RowData> decoder;
    private final TypeInformation<RowData> producedType;
    private final int decodedArity;
    private transient LastRow last;

    /**
     * @param decoder decodes the first {@code decodedArity} columns
     * @param producedType all columns: the decoded ones, then the payload
     */
    UnparsableAwareDeserializationSchema(
            DeserializationSchema<RowData> decoder,
            int decodedArity,
            TypeInformation<RowData> producedType) {
        this.decoder = decoder;
        this.decodedArity = decodedArity;
        this.producedType = producedType;
    }

    @Override
    public void open(InitializationContext context) throws Exception {
        decoder.open(context);
        last = new LastRow();
    }

    @Override
    public RowData deserialize(byte[] message) throws IOException {
        last.row = null;
        if (message != null) {
            decoder.deserialize(message, last);
        }
        RowData decoded = last.row;
        if (decoded != null) {
            return withPayload(decoded, null);
        }
        String text = message == null ? "" : new String(message, StandardCharsets.UTF_8);
        return withPayload(new GenericRowData(decodedArity), StringData.fromString(text));
    }

    @Override
    public void deserialize(byte[] message, Collector<RowData> out) throws IOException {
        // Exactly one row per record, read or not.
        out.collect(deserialize(message));
    }

    private RowData withPayload(RowData decoded, StringData payload) {
        if (decoded instanceof GenericRowData) {
            // The usual case: copy field references into one flat row (cheaper downstream
            // than a joined view).
            GenericRowData in = (GenericRowData) decoded;
            GenericRowData row = new GenericRowData(in.getRowKind(), decodedArity + 1);
            for (int i = 0; i < decodedArity; i++) {
                row.setField(i, in.getField(i));
            }
            row.setField(decodedArity, payload);
            return row;
        }
        return new JoinedRowData(decoded.getRowKind(), decoded, GenericRowData.of(payload));
    }

    @Override
    public boolean isEndOfStream(RowData nextElement) {
        return false;
    }

    @Override
    public TypeInformation<RowData> getProducedType() {
        return producedType;
    }

    /** Keeps the row the decoder emitted for the current record, if any. */
    private static final class LastRow implements Collector<RowData> {
        RowData row;

        @Override
        public void collect(RowData record) {
            row = record;
        }

        @Override
        public void close() {}
    }
}
