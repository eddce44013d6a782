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
 * Decodes a record with the {@link TopLevelFieldScanner} when it can vouch for it and with
 * Flink's JSON decoder otherwise (both give the same row; the scanner is the cheap path); a
 * summary record in its binary form with the {@link BinarySummaryDecoder}.
 * With a payload column: a decoded row gets a NULL payload appended; a record the JSON
 * decoder skipped becomes a row of NULLs with the record's text (invalid UTF-8 replaced) as
 * payload. Nothing read is lost. Without one, a skipped record yields no row, as with
 * Flink's JSON format.
 */
final class UnparsableAwareDeserializationSchema implements DeserializationSchema<RowData> {

    private static final long serialVersionUID = 1L;

    private final DeserializationSchema<RowData> decoder;
    private final TopLevelFieldScanner scanner;
    private final BinarySummaryDecoder summaries;
    private final TypeInformation<RowData> producedType;
    private final int decodedArity;
    private final boolean withPayload;
    private transient LastRow last;

    /**
     * @param decoder decodes the first {@code decodedArity} columns
     * @param scanner the fast path for the same columns, or null to always use {@code decoder}
     * @param summaries the same columns from a binary summary record, or null to read every
     *     record as JSON
     * @param withPayload whether a payload column follows the decoded ones
     * @param producedType all columns: the decoded ones, then the payload if any
     */
    UnparsableAwareDeserializationSchema(
            DeserializationSchema<RowData> decoder,
            TopLevelFieldScanner scanner,
            BinarySummaryDecoder summaries,
            int decodedArity,
            boolean withPayload,
            TypeInformation<RowData> producedType) {
        this.decoder = decoder;
        this.scanner = scanner;
        this.summaries = summaries;
        this.decodedArity = decodedArity;
        this.withPayload = withPayload;
        this.producedType = producedType;
    }

    @Override
    public void open(InitializationContext context) throws Exception {
        decoder.open(context);
        last = new LastRow();
    }

    @Override
    public RowData deserialize(byte[] message) throws IOException {
        if (summaries != null && BinarySummaryDecoder.isBinary(message)) {
            try {
                return summaries.decode(message, decodedArity + (withPayload ? 1 : 0));
            } catch (BinarySummaryDecoder.Unreadable problem) {
                // Skipped without a payload column, as the JSON decoder skips what it cannot
                // read; else a payload row naming the problem.
                return withPayload
                        ? withPayload(
                                new GenericRowData(decodedArity),
                                StringData.fromString(
                                        BinarySummaryDecoder.payloadText(message, problem)))
                        : null;
            }
        }
        if (scanner != null) {
            // Sized for the payload column too, which stays NULL.
            RowData row = scanner.decode(message, decodedArity + (withPayload ? 1 : 0));
            if (row != null) {
                return row;
            }
        }
        last.row = null;
        if (message != null) {
            decoder.deserialize(message, last);
        }
        RowData decoded = last.row;
        if (!withPayload) {
            return decoded;
        }
        if (decoded != null) {
            return withPayload(decoded, null);
        }
        String text = message == null ? "" : new String(message, StandardCharsets.UTF_8);
        return withPayload(new GenericRowData(decodedArity), StringData.fromString(text));
    }

    @Override
    public void deserialize(byte[] message, Collector<RowData> out) throws IOException {
        // With a payload column, exactly one row per record, read or not.
        RowData row = deserialize(message);
        if (row != null) {
            out.collect(row);
        }
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
