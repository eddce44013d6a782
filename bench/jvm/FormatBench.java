package dev.anchorwatch.flink;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Random;

import org.apache.flink.formats.common.TimestampFormat;
import org.apache.flink.formats.json.JsonParserRowDataDeserializationSchema;
import org.apache.flink.table.api.DataTypes;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.RowType;

/**
 * The anchorwatch-json decoders on their own, over a corpus of snapshot records (one base64
 * record a line; run.py writes it from the traffic generator): CPU time per record of the
 * byte scanner and of Flink's JSON decoder, alternating; and a differential fuzz that
 * mutates the records and compares both decoders' rows. See run.py.
 */
public final class FormatBench {

    private static final String[] COLUMNS = {
        "event_id", "event_time_ms", "doc_type", "snapshot_status", "anchor_count",
        "mean_drift", "max_drift", "max_kl_divergence", "resample_count"
    };

    private static RowType decoded() {
        return (RowType)
                DataTypes.ROW(
                                DataTypes.FIELD(COLUMNS[0], DataTypes.STRING()),
                                DataTypes.FIELD(COLUMNS[1], DataTypes.BIGINT()),
                                DataTypes.FIELD(COLUMNS[2], DataTypes.STRING()),
                                DataTypes.FIELD(COLUMNS[3], DataTypes.STRING()),
                                DataTypes.FIELD(COLUMNS[4], DataTypes.INT()),
                                DataTypes.FIELD(COLUMNS[5], DataTypes.DOUBLE()),
                                DataTypes.FIELD(COLUMNS[6], DataTypes.DOUBLE()),
                                DataTypes.FIELD(COLUMNS[7], DataTypes.DOUBLE()),
                                DataTypes.FIELD(COLUMNS[8], DataTypes.INT()),
                                DataTypes.FIELD("unparsable_payload", DataTypes.STRING()))
                        .getLogicalType();
    }

    static UnparsableAwareDeserializationSchema decoder(boolean scan) throws Exception {
        RowType all = decoded();
        RowType d = new RowType(all.getFields().subList(0, COLUMNS.length));
        var jackson =
                new JsonParserRowDataDeserializationSchema(
                        d, InternalTypeInfo.of(d), false, true, TimestampFormat.ISO_8601);
        var schema =
                new UnparsableAwareDeserializationSchema(
                        jackson,
                        scan ? TopLevelFieldScanner.forRowType(d) : null,
                        BinarySummaryDecoder.forRowType(d),
                        COLUMNS.length,
                        true,
                        InternalTypeInfo.of(all));
        schema.open(null);
        return schema;
    }

    /** A row as text that tells every difference (doubles by their bits). */
    static String show(RowData r) {
        StringBuilder b = new StringBuilder();
        RowType t = decoded();
        for (int i = 0; i < t.getFieldCount(); i++) {
            if (r.isNullAt(i)) {
                b.append("NULL|");
                continue;
            }
            switch (t.getTypeAt(i).getTypeRoot()) {
                case BIGINT:
                    b.append(r.getLong(i)).append('L');
                    break;
                case INTEGER:
                    b.append(r.getInt(i)).append('i');
                    break;
                case DOUBLE:
                    b.append(Double.doubleToRawLongBits(r.getDouble(i))).append('d');
                    break;
                default:
                    b.append('"').append(r.getString(i)).append('"');
            }
            b.append('|');
        }
        return b.toString();
    }

    // ASCII and valid UTF-8 only: with invalid UTF-8 in a field name, Flink's decoder itself
    // answers differently depending on the names it has seen before.
    private static final String[] PIECES = {
        "\"", "\\", "{", "}", "[", "]", ",", ":", " ", "0", "-", ".", "e", "null", "true",
        "\\u00e9", "\u00e9", "01", "1.", "-0", "1e5", "\\n", "\u0001", "\"event_id\":\"dup\",",
        "\"anchor_count\":3.5,", "\"mean_drift\":\"0.5\",", "\"resample_count\":2147483648,",
        "\"doc_type\":12,", "\"ev\\u0065nt_id\":\"esc\",", "\"max_drift\":1E400,"
    };

    static byte[] mutate(byte[] m, Random rnd) {
        for (int k = 1 + rnd.nextInt(3); k > 0; k--) {
            int p = rnd.nextInt(m.length + 1);
            byte[] cut;
            switch (rnd.nextInt(3)) {
                case 0:
                    cut = new byte[0];
                    int len = Math.min(1 + rnd.nextInt(4), m.length - p);
                    m = concat(slice(m, 0, p), cut, slice(m, p + len, m.length));
                    break;
                case 1:
                    byte[] piece =
                            PIECES[rnd.nextInt(PIECES.length)].getBytes(StandardCharsets.UTF_8);
                    m = concat(slice(m, 0, p), piece, slice(m, p, m.length));
                    break;
                default:
                    m = slice(m, 0, p);
            }
        }
        return m;
    }

    private static byte[] slice(byte[] m, int from, int to) {
        return java.util.Arrays.copyOfRange(m, from, to);
    }

    private static byte[] concat(byte[] a, byte[] b, byte[] c) {
        byte[] out = new byte[a.length + b.length + c.length];
        System.arraycopy(a, 0, out, 0, a.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        System.arraycopy(c, 0, out, a.length + b.length, c.length);
        return out;
    }

    public static void main(String[] args) throws Exception {
        List<byte[]> corpus = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(args[0]))) {
            corpus.add(Base64.getDecoder().decode(line));
        }
        var scanner = decoder(true);
        var jackson = decoder(false);
        if (args[1].equals("fuzz")) {
            Random rnd = new Random(Long.parseLong(args[2]));
            int n = Integer.parseInt(args[3]);
            int differ = 0;
            int refused = 0;
            for (int i = 0; i < n; i++) {
                byte[] m = mutate(corpus.get(rnd.nextInt(corpus.size())), rnd);
                String a = show(scanner.deserialize(m));
                String b = show(jackson.deserialize(m));
                refused += b.endsWith("NULL|") ? 0 : 1;
                if (!a.equals(b)) {
                    differ++;
                    System.out.println("DIFFER: " + new String(m, StandardCharsets.UTF_8));
                    System.out.println("  scanner: " + a + "\n  jackson: " + b);
                }
            }
            System.out.printf(
                    "fuzz: %,d mutated records, %,d refused (payload rows), %d decoded differently%n",
                    n, refused, differ);
            System.exit(differ == 0 ? 0 : 1);
        }
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long bytes = 0;
        for (byte[] m : corpus) {
            bytes += m.length;
        }
        int rounds = Integer.parseInt(args[2]);
        for (int r = 1; r <= rounds; r++) {
            double[] us = new double[2];
            for (int which = 0; which < 2; which++) {
                var schema = which == 0 ? scanner : jackson;
                long t0 = mx.getCurrentThreadCpuTime();
                int reps = 200;
                for (int k = 0; k < reps; k++) {
                    for (byte[] m : corpus) {
                        if (schema.deserialize(m).isNullAt(0)) {
                            throw new IllegalStateException("a corpus record was refused");
                        }
                    }
                }
                us[which] = (mx.getCurrentThreadCpuTime() - t0) / 1e3 / reps / corpus.size();
            }
            System.out.printf(
                    "round %d: scanner %.2f, jackson %.2f CPU-µs per record (%.0f bytes): "
                            + "the scanner takes %.0f%% of jackson's time%n",
                    r, us[0], us[1], (double) bytes / corpus.size(), 100 * us[0] / us[1]);
        }
    }
}
