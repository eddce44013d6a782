package dev.anchorwatch.flink;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.GenericTypeInfo;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.DoubleType;
import org.apache.flink.table.types.logical.IntType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.VarCharType;
import org.apache.flink.util.Collector;

/**
 * Decodes each snapshot record into a {@link SnapshotRecord} (one per record, read or not),
 * with its partition and offset for a dead letter's source: a summary in its binary form
 * straight from its bytes ({@link BinarySummaryDecoder}, its strings left in the Kafka
 * record's own array), any other record with the {@code anchorwatch-json} decoding (the
 * byte scanner, Flink's JSON decoder for what it cannot vouch for), its {@code kinds} and
 * {@code top_anchors} as their JSON text. Each record's breakdown goes into one holder
 * this task reuses: the route, chained after this, takes what it keeps before the next
 * record is read.
 */
final class SnapshotDeserializer implements KafkaRecordDeserializationSchema<SnapshotRecord> {

    private static final long serialVersionUID = 1L;

    private final UnparsableAwareDeserializationSchema decoder;

    private final TopLevelFieldScanner scanner;

    private transient EventBreakdown breakdown;

    private transient SnapshotRecord.JsonColumns columns;

    SnapshotDeserializer() {
        RowType decoded = decodedType();
        List<RowType.RowField> all = new ArrayList<>(decoded.getFields());
        all.add(new RowType.RowField(
                SnapshotRecord.COLUMNS[SnapshotRecord.PAYLOAD], VarCharType.STRING_TYPE));
        RowType withPayload = new RowType(all);
        scanner = TopLevelFieldScanner.forRowType(decoded, SnapshotRecord.JSON_COLUMNS);
        decoder =
                new UnparsableAwareDeserializationSchema(
                        AnchorwatchJsonFormatFactory.decoder(decoded),
                        // The scanner is asked below, without a row.
                        null,
                        // Binary summaries are read below, without a row.
                        null,
                        decoded.getFieldCount(),
                        /* withPayload= */ true,
                        InternalTypeInfo.of(withPayload));
    }

    /** The columns decoded from a JSON record ({@link SnapshotRecord#COLUMNS} but the payload). */
    static RowType decodedType() {
        LogicalType string = VarCharType.STRING_TYPE;
        LogicalType[] types = {
            string, new BigIntType(), string, string, new IntType(),
            new DoubleType(), new DoubleType(), new DoubleType(), new IntType(),
            string, new IntType(), string, string
        };
        List<RowType.RowField> fields = new ArrayList<>();
        for (int i = 0; i < types.length; i++) {
            fields.add(new RowType.RowField(SnapshotRecord.COLUMNS[i], types[i]));
        }
        return new RowType(fields);
    }

    @Override
    public void open(DeserializationSchema.InitializationContext context) throws Exception {
        decoder.open(context);
        breakdown = new EventBreakdown();
        columns = new SnapshotRecord.JsonColumns();
    }

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<SnapshotRecord> out)
            throws IOException {
        byte[] value = record.value();
        if (BinarySummaryDecoder.isBinary(value)) {
            // A Kafka record's value is its own array, never reused: the strings stay in it.
            SnapshotRecord summary = new SnapshotRecord(record.partition(), record.offset());
            summary.breakdown = breakdown.reset();
            try {
                BinarySummaryDecoder.read(value, summary);
            } catch (BinarySummaryDecoder.Unreadable problem) {
                summary = SnapshotRecord.unparsable(
                        BinarySummaryDecoder.payloadText(value, problem),
                        record.partition(),
                        record.offset());
            }
            out.collect(summary);
            return;
        }
        // The byte scanner straight into the record (its strings left in the Kafka record's
        // array); what it will not vouch for, Flink's JSON decoder into a row.
        SnapshotRecord scanned = new SnapshotRecord(record.partition(), record.offset());
        scanned.breakdown = breakdown.reset();
        columns.record = scanned;
        if (scanner.decode(value, columns)) {
            out.collect(scanned);
            return;
        }
        RowData row = decoder.deserialize(value);
        out.collect(SnapshotRecord.of(row, record.partition(), record.offset(), breakdown));
    }

    @Override
    public TypeInformation<SnapshotRecord> getProducedType() {
        // Chained to its router with object reuse: never serialised.
        return new GenericTypeInfo<>(SnapshotRecord.class);
    }
}
