package dev.anchorwatch.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.util.Collector;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The byte scanner's JSON columns against Flink's JSON decoder on the same records: where
 * the scanner answers, the snapshot it gives (every column, and the breakdown read from the
 * JSON columns' text) is the one Flink's decoder gives.
 */
class ScannerJacksonTest {

    private static final RowType TYPE = SnapshotDeserializer.decodedType();
    private static final int WIDTH = TYPE.getFieldCount() + 1;
    private static TopLevelFieldScanner scanner;
    private static DeserializationSchema<RowData> jackson;

    static final String GOOD = "{\"event_id\":\"e-1\",\"event_time_ms\":1764403201262,"
            + "\"doc_type\":\"invoice\",\"snapshot_status\":\"active\",\"anchor_count\":3,"
            + "\"source\":\"kong\",\"model\":\"m-2\",\"latency_ms\":120,"
            + "\"anchors\":[{\"anchor_id\":\"SECTION_001\",\"position\":1,\"drift_score\":0.5}],"
            + "\"mean_drift\":0.53,\"max_drift\":0.9,\"max_kl_divergence\":0.1,"
            + "\"resample_count\":0,\"kinds\":{\"SECTION\":{\"anchor_count\":2,"
            + "\"mean_drift\":0.345,\"max_drift\":0.5},\"TABLE\":{\"anchor_count\":1,"
            + "\"mean_drift\":0.9,\"max_drift\":0.9}},\"top_anchors\":[{\"anchor_id\":"
            + "\"TABLE_001\",\"position\":10,\"drift_score\":0.9},{\"anchor_id\":\"SECTION_001\","
            + "\"position\":1,\"drift_score\":0.5},{\"anchor_id\":\"SECTION_002\","
            + "\"position\":4,\"drift_score\":0.19}]}";

    @BeforeAll
    static void decoders() throws Exception {
        scanner = TopLevelFieldScanner.forRowType(TYPE, SnapshotRecord.JSON_COLUMNS);
        jackson = AnchorwatchJsonFormatFactory.decoder(TYPE);
        jackson.open(null);
    }

    /** What the drift job reads of a row: every column, the breakdown parsed. */
    static String snapshot(RowData decoded) {
        GenericRowData row = new GenericRowData(WIDTH);
        for (int i = 0; i < WIDTH - 1; i++) {
            row.setField(i, ((GenericRowData) decoded).getField(i));
        }
        return describe(SnapshotRecord.of(row, 0, 0, new EventBreakdown()));
    }

    static String describe(SnapshotRecord r) {
        StringBuilder out = new StringBuilder();
        out.append(r.isNullAt(SnapshotRecord.EVENT_ID) ? null : text(r, r.idFrom, r.idLength))
                .append('|').append(r.hasEventTime() ? r.eventTimeMs : null).append('|')
                .append(r.isNullAt(SnapshotRecord.DOC_TYPE)
                        ? null : text(r, r.docTypeFrom, r.docTypeLength)).append('|')
                .append(r.isNullAt(SnapshotRecord.SNAPSHOT_STATUS)
                        ? null : text(r, r.statusFrom, r.statusLength)).append('|')
                .append(r.isNullAt(SnapshotRecord.ANCHOR_COUNT) ? null : r.anchorCount).append('|')
                .append(r.isNullAt(SnapshotRecord.MEAN_DRIFT) ? null : r.meanDrift).append('|')
                .append(r.isNullAt(SnapshotRecord.MAX_DRIFT) ? null : r.maxDrift).append('|')
                .append(r.isNullAt(SnapshotRecord.MAX_KL_DIVERGENCE) ? null : r.maxKlDivergence)
                .append('|')
                .append(r.isNullAt(SnapshotRecord.RESAMPLE_COUNT) ? null : r.resampleCount)
                .append('|').append(r.hasModel() ? text(r, r.modelFrom, r.modelLength) : null)
                .append('|').append(r.isNullAt(SnapshotRecord.LATENCY_MS) ? null : r.latencyMs)
                .append('|').append(r.latency()).append('|')
                .append(BreakdownParserTest.kindLines(r.breakdown)).append('|')
                .append(BreakdownParserTest.topLines(r.breakdown));
        return out.toString();
    }

    static String text(SnapshotRecord r, int from, int length) {
        return new String(r.text, from, length, StandardCharsets.UTF_8);
    }

    /** The scanner straight into a record, as the drift job reads; null when it declines. */
    static String direct(byte[] record) {
        SnapshotRecord r = new SnapshotRecord(0, 0);
        r.breakdown = new EventBreakdown().reset();
        SnapshotRecord.JsonColumns columns = new SnapshotRecord.JsonColumns();
        columns.record = r;
        return scanner.decode(record, columns) ? describe(r) : null;
    }

    static RowData byJackson(byte[] record) throws Exception {
        List<RowData> rows = new ArrayList<>();
        jackson.deserialize(record, new Collector<RowData>() {
            @Override
            public void collect(RowData row) {
                rows.add(row);
            }

            @Override
            public void close() {}
        });
        return rows.isEmpty() ? null : rows.get(0);
    }

    /**
     * The scanner's snapshot if it answers (straight into the record as the drift job reads,
     * and as a row), and then Jackson's must be the same.
     */
    static String both(String json) throws Exception {
        byte[] record = json.getBytes(StandardCharsets.UTF_8);
        RowData scanned = scanner.decode(record, WIDTH - 1);
        String direct = direct(record);
        RowData decoded = byJackson(record);
        assertEquals(scanned == null, direct == null, json);
        if (scanned == null) {
            return decoded == null ? null : "jackson:" + snapshot(decoded);
        }
        assertNotNull(decoded, json);
        assertEquals(snapshot(decoded), snapshot(scanned), json);
        assertEquals(snapshot(decoded), direct, json);
        return direct;
    }

    @Test
    void aSnapshotWithItsBreakdownReadsAlikeAndTheScannerAnswers() throws Exception {
        String out = both(GOOD);
        assertEquals("e-1|1764403201262|invoice|active|3|0.53|0.9|0.1|0|m-2|120|120|"
                + "[SECTION 2 0.345 0.5, TABLE 1 0.9 0.9]|"
                + "[TABLE_001 10 0.9, SECTION_001 1 0.5, SECTION_002 4 0.19]", out);
        // Spaced, numbers spelled otherwise: the scanner keeps its own bytes, same values.
        String spaced = GOOD.replace("\"kinds\":{\"SECTION\":", "\"kinds\" : { \"SECTION\" :  ")
                .replace("\"drift_score\":0.9}", "\"drift_score\":9.0e-1 }");
        assertEquals(out, both(spaced));
    }

    @Test
    void aRecordFromBeforeTheBreakdownStillReads() throws Exception {
        String old = "{\"event_id\":\"e-1\",\"event_time_ms\":5,\"doc_type\":\"d\","
                + "\"snapshot_status\":\"active\",\"anchor_count\":0,\"anchors\":[],"
                + "\"mean_drift\":0.0,\"max_drift\":0.0,\"max_kl_divergence\":0.0,"
                + "\"resample_count\":0}";
        assertEquals("e-1|5|d|active|0|0.0|0.0|0.0|0|null|null|-1|[]|[]", both(old));
    }

    @Test
    void unusualBreakdownsAreLeftToJacksonOrReadAlike() throws Exception {
        String[][] cases = {
            // An escape in an id: Jackson's; read with the id unescaped.
            {"\"anchor_id\":\"TABLE_001\"", "\"anchor_id\":\"TABLE\\u005f001\""},
            {"\"anchor_id\":\"TABLE_001\"", "\"anchor_id\":\"T\\\"1\""},
            // JSON text in a string: its text, as Jackson gives it.
            {"\"kinds\":{\"SECTION\":{\"anchor_count\":2,\"mean_drift\":0.345,"
                    + "\"max_drift\":0.5},", "\"kinds\":\"{\\\"LIST\\\":{}}\",\"x\":{"},
            {"\"kinds\":{", "\"kinds\":7,\"y\":{"},
            {"\"kinds\":{", "\"kinds\":null,\"y\":{"},
            // Duplicate kinds, wrong types, big numbers.
            {"\"TABLE\":{", "\"SECTION\":{"},
            {"\"anchor_count\":1,", "\"anchor_count\":\"1\","},
            {"\"position\":10,", "\"position\":123456789012345678901,"},
            {"\"drift_score\":0.9}", "\"drift_score\":1E400}"},
            {"\"latency_ms\":120", "\"latency_ms\":-5"},
            {"\"latency_ms\":120", "\"latency_ms\":\"120\""},
            {"\"latency_ms\":120", "\"latency_ms\":3600001"},
            {"\"model\":\"m-2\"", "\"model\":{\"a\":1}"},
            {"\"model\":\"m-2\"", "\"model\":\"m\\u00e9\""},
            {"\"position\":1,", "\"position\":1,\"position\":2,"},
        };
        for (String[] c : cases) {
            assertNotNull(GOOD.contains(c[0]) ? "" : null, c[0]);
            both(GOOD.replaceFirst(java.util.regex.Pattern.quote(c[0]),
                    java.util.regex.Matcher.quoteReplacement(c[1])));
        }
        String escaped = GOOD.replace("\"anchor_id\":\"TABLE_001\"",
                "\"anchor_id\":\"TABLE\\u005f001\"");
        assertNull(scanner.decode(escaped.getBytes(StandardCharsets.UTF_8), WIDTH - 1));
        assertEquals("jackson:" + both(GOOD), both(escaped));
    }

    /** Seeded mutations of a snapshot: wherever the scanner answers, Jackson agrees. */
    @Test
    void mutationsReadAlikeWhereTheScannerAnswers() throws Exception {
        String[] pieces = {
            "\"", "\\", "{", "}", "[", "]", ",", ":", " ", "0", "-", ".", "e", "null", "true",
            "\\u00e9", "\u00e9", "1.", "-0", "1e5", "\"SECTION\":", "\"anchor_count\":2,",
            "{\"anchor_id\":\"X\",\"position\":0,\"drift_score\":0.5},", "\"OTHER\":{},",
        };
        Random random = new Random(34);
        int answered = 0;
        for (int n = 0; n < 20_000; n++) {
            StringBuilder record = new StringBuilder(GOOD);
            for (int k = 1 + random.nextInt(3); k > 0; k--) {
                int at = random.nextInt(record.length() + 1);
                switch (random.nextInt(3)) {
                    case 0:
                        record.delete(at, Math.min(record.length(), at + 1 + random.nextInt(4)));
                        break;
                    case 1:
                        record.insert(at, pieces[random.nextInt(pieces.length)]);
                        break;
                    default:
                        // Keep the record whole, mutate only inside the breakdown.
                        int from = GOOD.indexOf("\"kinds\"");
                        int to = Math.max(from, Math.min(record.length(), at));
                        record.insert(to, pieces[random.nextInt(pieces.length)]);
                }
            }
            String out = both(record.toString());
            answered += out != null && !out.startsWith("jackson:") ? 1 : 0;
        }
        // Both outcomes exercised.
        org.junit.jupiter.api.Assertions.assertTrue(answered > 1_000 && answered < 19_000,
                "the scanner answered " + answered);
    }
}
