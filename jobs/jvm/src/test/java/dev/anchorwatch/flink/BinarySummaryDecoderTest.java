package dev.anchorwatch.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.types.logical.RowType;
import org.junit.jupiter.api.Test;

/** v1 and v2 summaries (anchorwatch/contracts/avro.py) read into the job's record and rows. */
class BinarySummaryDecoderTest {

    /** Avro's binary encoding, as anchorwatch/contracts/avro.py writes it. */
    static final class Avro {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();

        Avro(byte[] header) {
            out.writeBytes(header);
        }

        Avro varlong(long n) {
            long z = (n << 1) ^ (n >> 63);
            while ((z & ~0x7FL) != 0) {
                out.write((int) ((z & 0x7F) | 0x80));
                z >>>= 7;
            }
            out.write((int) z);
            return this;
        }

        Avro string(String s) {
            byte[] utf8 = s.getBytes(StandardCharsets.UTF_8);
            varlong(utf8.length);
            out.writeBytes(utf8);
            return this;
        }

        Avro real(double d) {
            out.writeBytes(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putDouble(d)
                    .array());
            return this;
        }

        byte[] bytes() {
            return out.toByteArray();
        }
    }

    /** A v2 summary: model m-2, latency 120, two kinds, one top anchor. */
    static byte[] v2(String model, Integer latency) {
        Avro a = new Avro(BinarySummaryDecoder.HEADER)
                .string("e-1").varlong(1_764_403_201_262L).string("invoice").string("active")
                .varlong(3).varlong(1).string("kong");
        if (model == null) {
            a.varlong(0);
        } else {
            a.varlong(1).string(model);
        }
        if (latency == null) {
            a.varlong(0);
        } else {
            a.varlong(1).varlong(latency);
        }
        return a.real(0.53).real(0.9).real(0.1).varlong(0)
                .varlong(2).string("SECTION").varlong(2).real(0.345).real(0.5)
                .string("TABLE").varlong(1).real(0.9).real(0.9).varlong(0)
                .varlong(1).string("TABLE_001").varlong(10).real(0.9).varlong(0)
                .bytes();
    }

    static byte[] v1() {
        return new Avro(BinarySummaryDecoder.HEADER_V1)
                .string("e-1").varlong(1_764_403_201_262L).string("invoice").string("active")
                .varlong(3).varlong(0).real(0.53).real(0.9).real(0.1).varlong(0).bytes();
    }

    static SnapshotRecord record(byte[] m) throws BinarySummaryDecoder.Unreadable {
        SnapshotRecord r = new SnapshotRecord(0, 0);
        r.breakdown = new EventBreakdown().reset();
        BinarySummaryDecoder.read(m, r);
        return r;
    }

    @Test
    void aV2SummaryCarriesModelLatencyAndBreakdown() throws Exception {
        SnapshotRecord r = record(v2("m-2", 120));
        assertTrue(r.isValid(200, 512));
        assertEquals("m-2", new String(r.text, r.modelFrom, r.modelLength, StandardCharsets.UTF_8));
        assertEquals(120, r.latency());
        assertEquals(List.of("SECTION 2 0.345 0.5", "TABLE 1 0.9 0.9"),
                BreakdownParserTest.kindLines(r.breakdown));
        assertEquals(List.of("TABLE_001 10 0.9"), BreakdownParserTest.topLines(r.breakdown));
        SnapshotRecord none = record(v2(null, null));
        assertTrue(!none.hasModel() && none.latency() == -1);
    }

    @Test
    void aV1SummaryReadsWithoutThem() throws Exception {
        SnapshotRecord r = record(v1());
        assertTrue(r.isValid(200, 512));
        assertTrue(!r.hasModel() && r.latency() == -1);
        assertEquals(0, r.breakdown.kindMask);
        assertEquals(0, r.breakdown.topCount);
    }

    @Test
    void aBrokenV2RecordIsUnreadableNamingWhy() {
        byte[] good = v2("m-2", 120);
        // The model's union branch: right after the source.
        int branch = new Avro(BinarySummaryDecoder.HEADER)
                .string("e-1").varlong(1_764_403_201_262L).string("invoice").string("active")
                .varlong(3).varlong(1).string("kong").bytes().length;
        assertEquals(2, good[branch]);
        byte[] badBranch = good.clone();
        badBranch[branch] = 4;
        assertEquals("model: no union branch 2",
                assertThrows(BinarySummaryDecoder.Unreadable.class, () -> record(badBranch))
                        .getMessage());
        byte[] other = good.clone();
        other[5] ^= 1;
        assertTrue(assertThrows(BinarySummaryDecoder.Unreadable.class, () -> record(other))
                .getMessage().startsWith("another schema"));
        assertThrows(BinarySummaryDecoder.Unreadable.class,
                () -> record(Arrays.copyOf(good, good.length - 1)));
        assertThrows(BinarySummaryDecoder.Unreadable.class,
                () -> record(Arrays.copyOf(good, good.length + 1)));
        // A block claiming more entries than the bytes left could hold.
        byte[] huge = new Avro(BinarySummaryDecoder.HEADER)
                .string("e").varlong(1).string("d").string("active").varlong(0).varlong(0)
                .varlong(0).varlong(0).real(0).real(0).real(0).varlong(0)
                .varlong(1L << 40).bytes();
        assertTrue(assertThrows(BinarySummaryDecoder.Unreadable.class, () -> record(huge))
                .getMessage().startsWith("kinds: a block of"));
    }

    @Test
    void contractRulesOnTheBreakdownDropItNotTheRecord() throws Exception {
        byte[] m = new Avro(BinarySummaryDecoder.HEADER)
                .string("e").varlong(1).string("d").string("active").varlong(0).varlong(0)
                .varlong(1).string("\u0001bad").varlong(1).varlong(-5).real(0.5).real(0.5)
                .real(0).varlong(0)
                .varlong(1).string("FOO").varlong(1).real(0.5).real(0.5).varlong(0)
                .varlong(-1).varlong(22).string("A").varlong(0).real(7.0).varlong(0)
                .bytes();
        SnapshotRecord r = record(m);
        assertTrue(r.isValid(200, 512));
        assertEquals(-1, r.latency());
        assertEquals(0, r.breakdown.kindMask);
        assertEquals(0, r.breakdown.topCount);
        // The model is kept as written; the route holds it to the contract (ModelNames).
        assertTrue(r.hasModel());
    }

    @Test
    void aTableReadsTheBreakdownAsTheJsonFormWouldGiveIt() throws Exception {
        RowType type = SnapshotDeserializer.decodedType();
        BinarySummaryDecoder decoder = BinarySummaryDecoder.forRowType(type);
        GenericRowData row = decoder.decode(v2("m-2", 120), type.getFieldCount());
        assertEquals("m-2", row.getField(SnapshotRecord.MODEL).toString());
        assertEquals(120, row.getField(SnapshotRecord.LATENCY_MS));
        assertEquals("{\"SECTION\":{\"anchor_count\":2,\"mean_drift\":0.345,\"max_drift\":0.5},"
                + "\"TABLE\":{\"anchor_count\":1,\"mean_drift\":0.9,\"max_drift\":0.9}}",
                row.getField(SnapshotRecord.KINDS).toString());
        assertEquals("[{\"anchor_id\":\"TABLE_001\",\"position\":10,\"drift_score\":0.9}]",
                row.getField(SnapshotRecord.TOP_ANCHORS).toString());
        GenericRowData old = decoder.decode(v1(), type.getFieldCount());
        assertEquals(null, old.getField(SnapshotRecord.KINDS));
        assertEquals(null, old.getField(SnapshotRecord.MODEL));
    }
}
