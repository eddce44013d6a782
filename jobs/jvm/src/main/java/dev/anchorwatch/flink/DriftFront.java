package dev.anchorwatch.flink;

import java.time.Duration;
import java.util.Arrays;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Stream;

import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.KafkaSourceBuilder;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.util.OutputTag;

/**
 * The drift job's per-event path, in one place in the JVM (jobs/drift_job.py wires it in):
 *
 * <pre>
 *   Kafka snapshots --decode (anchorwatch-json)--> route (chained to the source)
 *     valid, on time  --DriftBatch, keyed by doc type--> window figures --> {@link #getWindows}
 *     invalid or late --row--> {@link #getOthers} (for the job's SQL: dead letters, late tallies)
 * </pre>
 *
 * <p>It replaces the SQL that did the same per event (the source table's metadata columns
 * and watermark, the validity filters, an exchange of whole rows, the window buffer): the
 * same decoding, checks, watermark and figures, with batches of small events crossing the
 * network.
 */
public final class DriftFront {

    /** Columns of {@link #getOthers}: a snapshot's decoded columns, then where from and late. */
    private static final String[] OTHER_COLUMNS =
            Stream.concat(
                            Arrays.stream(SnapshotRecord.ROW_COLUMNS),
                            Stream.of("kafka_partition", "kafka_offset", "late"))
                    .toArray(String[]::new);

    /**
     * Columns of {@link #getWindows} (jobs/drift_job.py WINDOW_FIELDS); {@code breakdown}:
     * the window's breakdown as JSON ({@link WindowBreakdown#toJson}).
     */
    public static final String[] WINDOW_COLUMNS = {
        "doc_type", "kind", "window_start_ms", "window_end_ms", "request_count", "mean_drift",
        "max_drift", "p95_drift", "stddev_drift", "anchor_count", "disabled_share",
        "zero_anchor_share", "resample_share", "mean_kl_divergence", "breakdown", "letter"
    };

    private static final int BREAKDOWN = 14;

    private final DataStream<Row> windows;
    private final DataStream<Row> others;

    private DriftFront(DataStream<Row> windows, DataStream<Row> others) {
        this.windows = windows;
        this.others = others;
    }

    /** One row per window that had events, and late tallies of events that missed theirs. */
    public DataStream<Row> getWindows() {
        return windows;
    }

    /** Every record that is not a valid on-time event, with a flag for the late ones. */
    public DataStream<Row> getOthers() {
        return others;
    }

    /**
     * @param startupMode earliest-offset, latest-offset or group-offsets (then earliest)
     * @param bounded stop at the topic's end as it was at the start
     */
    public static DriftFront build(
            StreamExecutionEnvironment env,
            String topic,
            String groupId,
            String startupMode,
            boolean bounded,
            Map<String, String> kafkaProperties,
            long windowSizeMs,
            long watermarkDelayMs,
            long idleTimeoutMs,
            boolean deduplicate,
            long lateReportMs,
            int maxIdChars,
            int maxDocTypeChars) {
        KafkaSource<SnapshotRecord> source =
                source(topic, groupId, startupMode, bounded, kafkaProperties,
                        new SnapshotDeserializer());
        WatermarkStrategy<SnapshotRecord> watermarks = watermarks(watermarkDelayMs, idleTimeoutMs);
        OutputTag<Row> othersTag = othersTag();
        SingleOutputStreamOperator<DriftBatch> events =
                // Per partition, as the snapshots table's declaration had it (pushed into
                // the source): a partition behind the others holds the watermark back.
                env.fromSource(source, watermarks, "snapshots")
                        .uid("anchorwatch-snapshots")
                        .transform(
                                "route snapshots",
                                new DriftBatch.Info(),
                                new RouteSnapshots(
                                        othersTag,
                                        deduplicate,
                                        windowSizeMs,
                                        maxIdChars,
                                        maxDocTypeChars))
                        .uid("anchorwatch-route");
        DataStream<Row> windows =
                events.keyBy(b -> b.docType, Types.STRING)
                        .transform(
                                "window figures",
                                rowType(WINDOW_COLUMNS, windowTypes()),
                                new WindowFiguresOperator(
                                        windowSizeMs, deduplicate, lateReportMs))
                        .uid("anchorwatch-window-figures");
        return new DriftFront(windows, events.getSideOutput(othersTag));
    }

    /**
     * The job's Kafka source over {@code topic}, records decoded by {@code deserializer}.
     *
     * @param startupMode earliest-offset, latest-offset or group-offsets (then earliest)
     * @param bounded stop at the topic's end as it was at the start
     */
    static <T> KafkaSource<T> source(
            String topic,
            String groupId,
            String startupMode,
            boolean bounded,
            Map<String, String> kafkaProperties,
            KafkaRecordDeserializationSchema<T> deserializer) {
        Properties properties = new Properties();
        properties.putAll(kafkaProperties);
        KafkaSourceBuilder<T> source =
                KafkaSource.<T>builder()
                        .setTopics(topic)
                        .setGroupId(groupId)
                        .setProperties(properties)
                        .setStartingOffsets(startingOffsets(startupMode))
                        .setDeserializer(deserializer);
        if (bounded) {
            source.setBounded(OffsetsInitializer.latest());
        }
        return source.build();
    }

    /** The snapshots' watermark: {@link DelayedMaxWatermark}, idle after the timeout. */
    static WatermarkStrategy<SnapshotRecord> watermarks(long watermarkDelayMs, long idleTimeoutMs) {
        return WatermarkStrategy.<SnapshotRecord>forGenerator(
                        context -> new DelayedMaxWatermark(watermarkDelayMs))
                .withTimestampAssigner(
                        (record, previous) ->
                                record.hasEventTime() ? record.eventTimeMs() : previous)
                .withIdleness(Duration.ofMillis(idleTimeoutMs));
    }

    /** The route's side output: every record that is not a valid on-time event. */
    static OutputTag<Row> othersTag() {
        return new OutputTag<>("others", rowType(OTHER_COLUMNS, otherTypes()));
    }

    // The connector's own SQL source takes the same deprecated reset strategy.
    @SuppressWarnings("deprecation")
    private static OffsetsInitializer startingOffsets(String mode) {
        switch (mode) {
            case "earliest-offset":
                return OffsetsInitializer.earliest();
            case "latest-offset":
                return OffsetsInitializer.latest();
            case "group-offsets":
                return OffsetsInitializer.committedOffsets(
                        org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer
                                .OffsetResetStrategy.EARLIEST);
            default:
                throw new IllegalArgumentException("unknown startup mode: " + mode);
        }
    }

    private static RowTypeInfo rowType(String[] names, TypeInformation<?>[] types) {
        return new RowTypeInfo(types, names);
    }

    private static TypeInformation<?>[] otherTypes() {
        return new TypeInformation<?>[] {
            Types.STRING, Types.LONG, Types.STRING, Types.STRING, Types.INT,
            Types.DOUBLE, Types.DOUBLE, Types.DOUBLE, Types.INT,
            Types.STRING, Types.INT, Types.LONG, Types.BOOLEAN
        };
    }

    private static TypeInformation<?>[] windowTypes() {
        return new TypeInformation<?>[] {
            Types.STRING, Types.STRING, Types.LONG, Types.LONG, Types.LONG, Types.DOUBLE,
            Types.DOUBLE, Types.DOUBLE, Types.DOUBLE, Types.LONG, Types.DOUBLE,
            Types.DOUBLE, Types.DOUBLE, Types.DOUBLE, Types.STRING, Types.STRING
        };
    }

    static Row windowRow(String docType, long start, long end, Row figures, String breakdown) {
        Row row = new Row(WINDOW_COLUMNS.length);
        row.setField(0, docType);
        row.setField(1, "window");
        row.setField(2, start);
        row.setField(3, end);
        for (int i = 0; i < figures.getArity(); i++) {
            row.setField(4 + i, figures.getField(i));
        }
        row.setField(BREAKDOWN, breakdown);
        return row;
    }

    static Row lateRow(String docType, long count) {
        Row row = new Row(WINDOW_COLUMNS.length);
        row.setField(0, docType);
        row.setField(1, "late");
        row.setField(4, count);
        return row;
    }

    /**
     * The watermark of the snapshots table's declaration ({@code event_time - delay}): the
     * largest event time seen less the delay, emitted periodically; a record without an
     * event time leaves it alone.
     */
    static final class DelayedMaxWatermark implements WatermarkGenerator<SnapshotRecord> {
        private final long delayMs;
        private long max = Long.MIN_VALUE;

        DelayedMaxWatermark(long delayMs) {
            this.delayMs = delayMs;
        }

        @Override
        public void onEvent(SnapshotRecord record, long timestamp, WatermarkOutput output) {
            // An event time so far in the past that subtracting the delay would wrap round to
            // the far future must not end event time for good.
            if (record.hasEventTime() && record.eventTimeMs() >= Long.MIN_VALUE + delayMs) {
                max = Math.max(max, record.eventTimeMs() - delayMs);
            }
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {
            if (max != Long.MIN_VALUE) {
                output.emitWatermark(new Watermark(max));
            }
        }
    }
}
