package dev.anchorwatch.flink;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/** The two shapes read strictly; duplicates and escapes read as Jackson's tree holds them. */
class BreakdownParserTest {

    static EventBreakdown kinds(String json) {
        EventBreakdown out = new EventBreakdown().reset();
        byte[] m = json.getBytes(StandardCharsets.UTF_8);
        BreakdownParser.kinds(m, 0, m.length, out);
        return out;
    }

    static EventBreakdown top(String json) {
        EventBreakdown out = new EventBreakdown().reset();
        byte[] m = json.getBytes(StandardCharsets.UTF_8);
        BreakdownParser.topAnchors(m, 0, m.length, out);
        return out;
    }

    /** The kinds as "KIND count mean max" lines, in KINDS order. */
    static List<String> kindLines(EventBreakdown b) {
        List<String> out = new ArrayList<>();
        for (int k = 0; k < EventBreakdown.KIND_COUNT; k++) {
            if ((b.kindMask & (1 << k)) != 0) {
                out.add(EventBreakdown.KINDS[k] + " " + b.count[k] + " " + b.mean[k] + " "
                        + b.max[k]);
            }
        }
        return out;
    }

    static List<String> topLines(EventBreakdown b) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < b.topCount; i++) {
            out.add(new String(b.topArray[i], b.topFrom[i], b.topLength[i],
                    StandardCharsets.UTF_8) + " " + b.topPosition[i] + " " + b.topDrift[i]);
        }
        return out;
    }

    @Test
    void readsTheKindsTheContractWrites() {
        EventBreakdown b = kinds("{\"SECTION\":{\"anchor_count\":2,\"mean_drift\":0.25,"
                + "\"max_drift\":0.5},\"OTHER\":{\"anchor_count\":1,\"mean_drift\":1,"
                + "\"max_drift\":1.0}}");
        assertEquals(List.of("SECTION 2 0.25 0.5", "OTHER 1 1.0 1.0"), kindLines(b));
        assertEquals(List.of(), kindLines(kinds("{}")));
        assertEquals(List.of("TABLE 3 0.1 1.0E-5"), kindLines(kinds(
                " { \"TABLE\" : { \"max_drift\" : 1e-5 , \"mean_drift\" : 0.1000000000000000055511"
                        + " , \"anchor_count\" : 3 } } ")));
    }

    @Test
    void refusesEveryKindForAnythingOutsideTheShape() {
        String[] refused = {
            "{\"SECTIONS\":{\"anchor_count\":1,\"mean_drift\":0.5,\"max_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":1,\"mean_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":1,\"mean_drift\":0.5,\"max_drift\":0.5,\"x\":1}}",
            "{\"SECTION\":{\"anchor_count\":0,\"mean_drift\":0.5,\"max_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":1.0,\"mean_drift\":0.5,\"max_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":1e0,\"mean_drift\":0.5,\"max_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":\"1\",\"mean_drift\":0.5,\"max_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":1,\"mean_drift\":1.5,\"max_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":1,\"mean_drift\":\"NaN\",\"max_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":1,\"mean_drift\":-0.1,\"max_drift\":0.5}}",
            "{\"SECTION\":{\"anchor_count\":3000000000,\"mean_drift\":0.5,\"max_drift\":0.5}}",
            "{\"SECTION\":[1,0.5,0.5]}",
            "[]",
            "\"{}\"",
            "{\"SECTION\":{\"anchor_count\":1,\"mean_drift\":0.5,\"max_drift\":0.5}} x",
            "{\"SECTION\":{\"anchor_count\":1,\"mean_drift\":0.5,\"max_drift\":0.5}",
            "{\"section\":{\"anchor_count\":1,\"mean_drift\":0.5,\"max_drift\":0.5}}",
        };
        for (String json : refused) {
            assertEquals(List.of(), kindLines(kinds(json)), json);
        }
    }

    @Test
    void aDuplicateKeyKeepsItsLastValueRightOrWrong() {
        String good = "{\"anchor_count\":1,\"mean_drift\":0.5,\"max_drift\":0.5}";
        String bad = "{\"anchor_count\":\"x\",\"mean_drift\":0.5,\"max_drift\":0.5}";
        assertEquals(List.of("SECTION 1 0.5 0.5"),
                kindLines(kinds("{\"SECTION\":" + bad + ",\"SECTION\":" + good + "}")));
        assertEquals(List.of(),
                kindLines(kinds("{\"SECTION\":" + good + ",\"SECTION\":" + bad + "}")));
        assertEquals(List.of("LIST 4 0.5 0.5"), kindLines(kinds(
                "{\"LIST\":{\"anchor_count\":[2],\"anchor_count\":4,\"mean_drift\":0.5,"
                        + "\"max_drift\":0.5}}")));
    }

    @Test
    void readsTopAnchorsWithTheirIdsUnescaped() {
        EventBreakdown b = top("[{\"anchor_id\":\"TABLE_001\",\"position\":10,"
                + "\"drift_score\":0.9},{\"drift_score\":0.5,\"position\":-0,"
                + "\"anchor_id\":\"S\\\"\\\\\\u00e9\\ud83d\\ude00\"}]");
        assertEquals(List.of("TABLE_001 10 0.9", "S\"\\\u00e9\ud83d\ude00 0 0.5"), topLines(b));
        assertEquals(List.of(), topLines(top("[]")));
        // The id as a range of the text itself when it needs no unescaping.
        byte[] m = "[{\"anchor_id\":\"A\",\"position\":1,\"drift_score\":1}]"
                .getBytes(StandardCharsets.UTF_8);
        EventBreakdown plain = new EventBreakdown().reset();
        BreakdownParser.topAnchors(m, 0, m.length, plain);
        assertArrayEquals(m, plain.topArray[0]);
    }

    @Test
    void refusesEveryTopAnchorForAnythingOutsideTheShape() {
        String one = "{\"anchor_id\":\"A\",\"position\":1,\"drift_score\":0.5}";
        String[] refused = {
            "[" + one + "," + one + "," + one + "," + one + "]",
            "[{\"anchor_id\":\"\",\"position\":1,\"drift_score\":0.5}]",
            "[{\"anchor_id\":\"a\\u0001\",\"position\":1,\"drift_score\":0.5}]",
            "[{\"anchor_id\":\"a\\u007f\",\"position\":1,\"drift_score\":0.5}]",
            "[{\"anchor_id\":\"" + "x".repeat(201) + "\",\"position\":1,\"drift_score\":0.5}]",
            "[{\"anchor_id\":\"\\ud800\",\"position\":1,\"drift_score\":0.5}]",
            "[{\"anchor_id\":7,\"position\":1,\"drift_score\":0.5}]",
            "[{\"anchor_id\":\"A\",\"position\":-1,\"drift_score\":0.5}]",
            "[{\"anchor_id\":\"A\",\"position\":1.5,\"drift_score\":0.5}]",
            "[{\"anchor_id\":\"A\",\"position\":1,\"drift_score\":2}]",
            "[{\"anchor_id\":\"A\",\"position\":1}]",
            "[" + one + ",{\"anchor_id\":\"B\",\"position\":1,\"drift_score\":0.5,\"z\":0}]",
            "[" + one + ",5]",
            "{}",
        };
        for (String json : refused) {
            assertEquals(List.of(), topLines(top(json)), json);
        }
        // 200 characters, some of them two bytes: an identifier.
        String id = "\u00e9".repeat(200);
        assertEquals(1, top("[{\"anchor_id\":\"" + id + "\",\"position\":0,\"drift_score\":0}]")
                .topCount);
    }
}
