package dev.anchorwatch.flink;

import java.util.Map;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

/**
 * The benchmark's floors under the drift job (bench/job.py), each bounded over a topic with
 * the drift job's own source (the DataStream Kafka source, chained, object reuse) into a
 * discarding sink, so that the steps between reading a record and the drift job's work can
 * be told apart, side by side in one run:
 *
 * <ul>
 *   <li>{@code discard}: each record's value handed on, never looked at;
 *   <li>{@code touch}: every byte of each value loaded once (what looking inside a record
 *       costs at the least: the bytes were written by the source's fetcher thread);
 *   <li>{@code decode}: each record decoded as the drift job decodes it ({@link
 *       SnapshotDeserializer}), then dropped;
 *   <li>{@code route}: decoded, with the drift job's watermarks, and routed into batches
 *       per doc type ({@link RouteSnapshots}: checks, id hash), the batches dropped;
 *   <li>{@code exchange}: the same batches sent across the keyed exchange, then dropped.
 * </ul>
 *
 * <p>The drift job is {@code exchange} plus its window figures and its SQL and Python
 * stages downstream (verdicts, dead letters).
 */
public final class ReadFloor {

    private ReadFloor() {}

    /** The drift job's source over the whole topic as it is now, from the earliest offset. */
    private static <T> KafkaSource<T> source(String topic, String groupId,
            Map<String, String> kafkaProperties, KafkaRecordDeserializationSchema<T> deserializer) {
        return DriftFront.source(topic, groupId, "earliest-offset", true, kafkaProperties,
                deserializer);
    }

    /**
     * Adds the floor job {@code mode} over {@code topic} to {@code env}; the arguments after
     * it are the drift job's ({@link DriftFront#build}), for {@code route} and {@code
     * exchange}.
     */
    public static void build(
            StreamExecutionEnvironment env,
            String topic,
            String groupId,
            Map<String, String> kafkaProperties,
            String mode,
            long windowSizeMs,
            long watermarkDelayMs,
            long idleTimeoutMs,
            boolean deduplicate,
            int maxIdChars,
            int maxDocTypeChars) {
        if (mode.equals("decode")) {
            env.fromSource(source(topic, groupId, kafkaProperties, new SnapshotDeserializer()),
                            WatermarkStrategy.noWatermarks(), "floor " + mode)
                    .sinkTo(new DiscardingSink<>());
            return;
        }
        if (mode.equals("route") || mode.equals("exchange")) {
            SingleOutputStreamOperator<DriftBatch> batches =
                    env.fromSource(
                                    source(topic, groupId, kafkaProperties,
                                            new SnapshotDeserializer()),
                                    DriftFront.watermarks(watermarkDelayMs, idleTimeoutMs),
                                    "floor " + mode)
                            .transform("route snapshots", new DriftBatch.Info(),
                                    new RouteSnapshots(DriftFront.othersTag(), deduplicate,
                                            windowSizeMs, maxIdChars, maxDocTypeChars));
            if (mode.equals("route")) {
                batches.sinkTo(new DiscardingSink<>());
            } else {
                batches.keyBy(b -> b.docType, Types.STRING).sinkTo(new DiscardingSink<>());
            }
            return;
        }
        if (!mode.equals("discard") && !mode.equals("touch")) {
            throw new IllegalArgumentException("unknown floor: " + mode);
        }
        env.fromSource(source(topic, groupId, kafkaProperties, new Values(mode.equals("touch"))),
                        WatermarkStrategy.noWatermarks(), "floor " + mode)
                .sinkTo(new DiscardingSink<>());
    }

    /** Each record's value, its bytes loaded first when {@code touch}. */
    private static final class Values implements KafkaRecordDeserializationSchema<byte[]> {
        private static final long serialVersionUID = 1L;

        private final boolean touch;
        /** Where the loaded bytes go, so that the compiler keeps the loads. */
        private long touched;

        Values(boolean touch) {
            this.touch = touch;
        }

        @Override
        public void open(DeserializationSchema.InitializationContext context) {}

        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<byte[]> out) {
            byte[] value = record.value();
            if (touch) {
                long bits = 0;
                for (byte b : value) {
                    bits += b;
                }
                touched += bits;
            }
            out.collect(value);
        }

        @Override
        public TypeInformation<byte[]> getProducedType() {
            return PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;
        }
    }
}
