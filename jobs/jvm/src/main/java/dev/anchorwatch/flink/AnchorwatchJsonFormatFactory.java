package dev.anchorwatch.flink;

import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.formats.common.TimestampFormat;
import org.apache.flink.formats.json.JsonParserRowDataDeserializationSchema;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.format.DecodingFormat;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.factories.DeserializationFormatFactory;
import org.apache.flink.table.factories.DynamicTableFactory;
import org.apache.flink.table.factories.FactoryUtil;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalTypeFamily;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;

/**
 * Format {@code anchorwatch-json}: Flink's JSON decoding (a field of the wrong type becomes
 * NULL, unknown fields are skipped) that does not drop a record which is not a JSON object.
 * Such a record comes out with every decoded column NULL and its text in the payload column
 * (option {@code payload-column}, default {@code unparsable_payload}, declared last), so one
 * reader of a topic both aggregates records and dead-letters the unreadable ones.
 *
 * <p>Option {@code decoder}: {@code scanner} (default) reads the declared top-level fields
 * straight from the bytes and only checks the rest for well-formedness (a snapshot's
 * anchors, which the job never reads, are most of its bytes), handing any record it cannot
 * vouch for to Flink's decoder; {@code jackson} uses Flink's decoder for every record. Both
 * give the same rows.
 *
 * <p>Option {@code json-columns}: STRING columns that take an object or array as its JSON
 * text (a snapshot's {@code kinds}, {@code top_anchors}). Flink's decoder gives any such
 * value as its tree's compact text; the scanner gives the value's own bytes when no string
 * in it has an escape: the same JSON value, maybe spaced or spelled differently.
 *
 * <p>A record of the summaries topic in its binary form (Avro single-object encoding of
 * {@code SnapshotSummary}) is decoded by {@link BinarySummaryDecoder} with either option:
 * the same columns as its JSON form would give, or a payload row naming what is wrong.
 */
public final class AnchorwatchJsonFormatFactory implements DeserializationFormatFactory {

    public static final String IDENTIFIER = "anchorwatch-json";

    public static final ConfigOption<String> PAYLOAD_COLUMN =
            ConfigOptions.key("payload-column")
                    .stringType()
                    .defaultValue("unparsable_payload")
                    .withDescription(
                            "Last STRING column: NULL for a decoded record, the record's text"
                                    + " for one that is not a JSON object.");

    public static final ConfigOption<String> DECODER =
            ConfigOptions.key("decoder")
                    .stringType()
                    .defaultValue("scanner")
                    .withDescription(
                            "'scanner': decode the declared top-level fields from the bytes and"
                                    + " only check the rest, Flink's JSON decoder for records it"
                                    + " cannot vouch for; 'jackson': Flink's JSON decoder only.");

    public static final ConfigOption<List<String>> JSON_COLUMNS =
            ConfigOptions.key("json-columns")
                    .stringType()
                    .asList()
                    .defaultValues()
                    .withDescription(
                            "STRING columns that take a JSON object or array as its text;"
                                    + " the scanner gives the value's own bytes (same JSON"
                                    + " value as Flink's decoder's compact re-writing).");

    @Override
    public DecodingFormat<DeserializationSchema<RowData>> createDecodingFormat(
            DynamicTableFactory.Context context, ReadableConfig formatOptions) {
        FactoryUtil.validateFactoryOptions(this, formatOptions);
        final String payloadColumn = formatOptions.get(PAYLOAD_COLUMN);
        final String decoderName = formatOptions.get(DECODER);
        if (!decoderName.equals("scanner") && !decoderName.equals("jackson")) {
            throw new ValidationException(
                    String.format(
                            "format '%s': decoder must be 'scanner' or 'jackson', not '%s'",
                            IDENTIFIER, decoderName));
        }
        final boolean scan = decoderName.equals("scanner");
        final Set<String> jsonColumns = new HashSet<>(formatOptions.get(JSON_COLUMNS));
        return new DecodingFormat<>() {
            @Override
            public DeserializationSchema<RowData> createRuntimeDecoder(
                    DynamicTableSource.Context sourceContext, DataType physicalDataType) {
                RowType rowType = (RowType) physicalDataType.getLogicalType();
                List<String> names = rowType.getFieldNames();
                int payload = names.indexOf(payloadColumn);
                TypeInformation<RowData> produced =
                        sourceContext.createTypeInformation(physicalDataType);
                if (payload < 0) {
                    // The query does not read the payload column: plain JSON decoding.
                    return new UnparsableAwareDeserializationSchema(
                            decoder(rowType),
                            scan ? TopLevelFieldScanner.forRowType(rowType, jsonColumns) : null,
                            BinarySummaryDecoder.forRowType(rowType),
                            names.size(),
                            /* withPayload= */ false,
                            produced);
                }
                if (payload != names.size() - 1
                        || !rowType.getTypeAt(payload)
                                .getTypeRoot()
                                .getFamilies()
                                .contains(LogicalTypeFamily.CHARACTER_STRING)) {
                    throw new ValidationException(
                            String.format(
                                    "format '%s': column '%s' must be the last value column and"
                                            + " a STRING",
                                    IDENTIFIER, payloadColumn));
                }
                RowType decoded = new RowType(rowType.getFields().subList(0, payload));
                return new UnparsableAwareDeserializationSchema(
                        decoder(decoded),
                        scan ? TopLevelFieldScanner.forRowType(decoded, jsonColumns) : null,
                        BinarySummaryDecoder.forRowType(decoded),
                        payload,
                        /* withPayload= */ true,
                        produced);
            }

            @Override
            public ChangelogMode getChangelogMode() {
                return ChangelogMode.insertOnly();
            }
        };
    }

    static DeserializationSchema<RowData> decoder(RowType rowType) {
        return new JsonParserRowDataDeserializationSchema(
                rowType,
                InternalTypeInfo.of(rowType),
                /* failOnMissingField= */ false,
                /* ignoreParseErrors= */ true,
                TimestampFormat.ISO_8601);
    }

    @Override
    public String factoryIdentifier() {
        return IDENTIFIER;
    }

    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return Collections.emptySet();
    }

    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        return Set.of(PAYLOAD_COLUMN, DECODER, JSON_COLUMNS);
    }
}
