package dev.anchorwatch.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;

import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.junit.jupiter.api.Test;

/**
 * The breakdown's whole way in the JVM: v2 summaries decoded, routed into batches (each sent
 * through the exchange's serializer), counted run by run into their windows, the window's
 * state through its serializer, its JSON: the same as a plain computation of the rules
 * (anchorwatch/contracts/breakdown.py) over the events each window counted.
 */
class WindowPathTest {

    static final long MIN = 60_000;

    /** One generated event, as its fields and as the record the connectors would write. */
    record Event(String id, long time, double drift, String model, Integer latency,
            int[] kindCount, double[] kindMean, double[] kindMax, String[] topId,
            long[] topPosition, double[] topDrift, byte[] avro) {}

    static Event event(Random r, int n, long time, String model) {
        int[] count = new int[8];
        double[] mean = new double[8];
        double[] max = new double[8];
        BinarySummaryDecoderTest.Avro kinds = new BinarySummaryDecoderTest.Avro(new byte[0]);
        int present = 0;
        for (int k = 0; k < 8; k++) {
            if (r.nextInt(3) == 0) {
                count[k] = r.nextInt(10) == 0 ? Integer.MAX_VALUE : 1 + r.nextInt(4);
                mean[k] = r.nextInt(20) / 20.0;
                max[k] = Math.min(1.0, mean[k] + r.nextInt(3) / 10.0);
                kinds.string(EventBreakdown.KINDS[k]).varlong(count[k]).real(mean[k]).real(max[k]);
                present++;
            }
        }
        int tops = r.nextInt(4);
        String[] topId = new String[tops];
        long[] topPosition = new long[tops];
        double[] topDrift = new double[tops];
        BinarySummaryDecoderTest.Avro top = new BinarySummaryDecoderTest.Avro(new byte[0]);
        for (int a = 0; a < tops; a++) {
            topId[a] = (r.nextBoolean() ? "SECTION_" : "TABLE_") + r.nextInt(3);
            topPosition[a] = r.nextInt(3);
            topDrift[a] = r.nextInt(5) / 4.0;
            top.string(topId[a]).varlong(topPosition[a]).real(topDrift[a]);
        }
        Integer latency = r.nextInt(4) == 0 ? null : r.nextInt(4_000_000) >> r.nextInt(22);
        double drift = r.nextInt(100) / 100.0;
        String id = "e-" + n;
        BinarySummaryDecoderTest.Avro a = new BinarySummaryDecoderTest.Avro(
                        BinarySummaryDecoder.HEADER)
                .string(id).varlong(time).string("invoice").string("active").varlong(3)
                .varlong(0);
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
        a.real(drift).real(drift).real(0).varlong(0);
        if (present > 0) {
            a.varlong(present).out.writeBytes(kinds.bytes());
        }
        a.varlong(0);
        if (tops > 0) {
            a.varlong(tops).out.writeBytes(top.bytes());
        }
        a.varlong(0);
        return new Event(id, time, drift, model, latency, count, mean, max, topId, topPosition,
                topDrift, a.bytes());
    }

    static DriftBatch exchange(DriftBatch b) throws IOException {
        DataOutputSerializer out = new DataOutputSerializer(1024);
        DriftBatch.Serializer.INSTANCE.serialize(b, out);
        return DriftBatch.Serializer.INSTANCE.deserialize(
                new DataInputDeserializer(out.getSharedBuffer(), 0, out.length()));
    }

    static WindowFigures.Accumulator checkpointed(WindowFigures.Accumulator acc)
            throws IOException {
        DataOutputSerializer out = new DataOutputSerializer(1024);
        AccumulatorSerializer.INSTANCE.serialize(AccumulatorSerializer.INSTANCE.copy(acc), out);
        return AccumulatorSerializer.INSTANCE.deserialize(
                new DataInputDeserializer(out.getSharedBuffer(), 0, out.length()));
    }

    /** Routes the events in batches of {@code perBatch} and counts them: window -> JSON. */
    static Map<Long, String> run(List<Event> events, int perBatch, boolean dedup)
            throws Exception {
        Map<Long, WindowFigures.Accumulator> windows = new TreeMap<>();
        RunCounter runs = new RunCounter(dedup);
        EventBreakdown scratch = new EventBreakdown();
        DriftBatch batch = new DriftBatch("invoice", dedup);
        for (int n = 0; n < events.size(); n++) {
            SnapshotRecord r = new SnapshotRecord(0, n);
            r.breakdown = scratch.reset();
            BinarySummaryDecoder.read(events.get(n).avro(), r);
            long[] hash = IdSet.murmur3x64(r.text, r.idFrom, r.idLength);
            batch.add(r, hash[0], hash[1], r.eventTimeMs - Math.floorMod(r.eventTimeMs, MIN));
            if (batch.size == perBatch || n == events.size() - 1) {
                DriftBatch b = exchange(batch);
                runs.startBatch(b);
                int i = 0;
                int candidate = 0;
                while (i < b.size) {
                    long start = b.eventTimeMs[i] - Math.floorMod(b.eventTimeMs[i], MIN);
                    int end = i + 1;
                    while (end < b.size && b.eventTimeMs[end] >= start
                            && b.eventTimeMs[end] < start + MIN) {
                        end++;
                    }
                    WindowFigures.Accumulator acc = windows.computeIfAbsent(start, s -> {
                        WindowFigures.Accumulator w = new WindowFigures.Accumulator();
                        w.breakdown = new WindowBreakdown();
                        return w;
                    });
                    candidate = runs.count(acc, b, i, end, candidate);
                    i = end;
                }
                // As between checkpoints: the state's copy and serializer keep every figure.
                windows.replaceAll((start, acc) -> {
                    try {
                        return checkpointed(acc);
                    } catch (IOException e) {
                        throw new IllegalStateException(e);
                    }
                });
                batch.reset("invoice");
            }
        }
        Map<Long, String> out = new TreeMap<>();
        windows.forEach((start, acc) -> out.put(start, acc.breakdown.toJson()));
        return out;
    }

    /** The rules, plainly, over the events each window counted, in arrival order. */
    static Map<Long, String> expected(List<Event> events, boolean dedup) {
        Map<Long, List<Event>> windows = new TreeMap<>();
        Set<String> seen = new HashSet<>();
        for (Event e : events) {
            long start = e.time() - Math.floorMod(e.time(), MIN);
            if (!dedup || seen.add(start + "/" + e.id())) {
                windows.computeIfAbsent(start, s -> new ArrayList<>()).add(e);
            }
        }
        Map<Long, String> out = new TreeMap<>();
        windows.forEach((start, counted) -> out.put(start, plain(counted)));
        return out;
    }

    static String plain(List<Event> counted) {
        StringBuilder out = new StringBuilder("{\"kinds\":{");
        String sep = "";
        for (int k = 0; k < 8; k++) {
            long n = 0;
            double weighted = 0.0;
            double max = -1;
            for (Event e : counted) {
                if (e.kindCount()[k] > 0) {
                    weighted += e.kindCount()[k] * e.kindMean()[k];
                    n += e.kindCount()[k];
                    max = Math.max(max, e.kindMax()[k]);
                }
            }
            if (n > 0) {
                out.append(sep).append('"').append(EventBreakdown.KINDS[k])
                        .append("\":{\"anchor_count\":").append(n).append(",\"mean_drift\":")
                        .append(weighted / n).append(",\"max_drift\":").append(max).append('}');
                sep = ",";
            }
        }
        out.append("},\"top_anchors\":[");
        List<Object[]> anchors = new ArrayList<>();
        for (Event e : counted) {
            for (int a = 0; a < e.topId().length; a++) {
                anchors.add(new Object[] {e.topDrift()[a], e.topPosition()[a], e.topId()[a],
                    e.id()});
            }
        }
        // A stable sort: equal anchors keep their arrival order.
        anchors.sort(Comparator.comparing((Object[] a) -> -(double) a[0])
                .thenComparing(a -> (long) a[1]).thenComparing(a -> (String) a[2]));
        sep = "";
        for (Object[] a : anchors.subList(0, Math.min(5, anchors.size()))) {
            out.append(sep).append("{\"anchor_id\":\"").append(a[2]).append("\",\"position\":")
                    .append(a[1]).append(",\"drift_score\":").append(a[0])
                    .append(",\"event_id\":\"").append(a[3]).append("\"}");
            sep = ",";
        }
        out.append("],\"models\":[");
        LinkedHashMap<String, double[]> tracked = new LinkedHashMap<>();  // name -> n, sum
        long otherN = 0;
        double otherSum = 0.0;
        for (Event e : counted) {
            String model = e.model() == null ? null : valid(e.model());
            double[] m = tracked.get(model);
            if (m == null && tracked.size() < 32) {
                tracked.put(model, m = new double[2]);
            }
            if (m == null) {
                otherN++;
                otherSum += e.drift();
            } else {
                m[0]++;
                m[1] += e.drift();
            }
        }
        List<String> names = new ArrayList<>(tracked.keySet());
        names.sort(Comparator.comparing((String name) -> -tracked.get(name)[0])
                .thenComparing(Comparator.nullsLast(Comparator.naturalOrder())));
        List<String> listed = names.subList(0, Math.min(5, names.size()));
        sep = "";
        for (String name : listed) {
            double[] m = tracked.get(name);
            out.append(sep).append("{\"model\":").append(name == null ? "null" : "\"" + name + "\"")
                    .append(",\"request_count\":").append((long) m[0]).append(",\"mean_drift\":")
                    .append(m[1] / m[0]).append('}');
            sep = ",";
        }
        out.append(']');
        long requests = otherN;
        double sum = 0.0;
        for (Map.Entry<String, double[]> m : tracked.entrySet()) {
            if (!listed.contains(m.getKey())) {
                requests += (long) m.getValue()[0];
                sum += m.getValue()[1];
            }
        }
        if (requests > 0) {
            out.append(",\"other_models\":{\"model_count\":")
                    .append(tracked.size() - listed.size() + otherN)
                    .append(",\"request_count\":").append(requests).append(",\"mean_drift\":")
                    .append((sum + otherSum) / requests).append('}');
        }
        List<Integer> latencies = new ArrayList<>();
        for (Event e : counted) {
            Integer l = e.latency();
            if (l != null && l <= 3_600_000) {
                int shift = Math.max(32 - Integer.numberOfLeadingZeros(l) - 7, 0);
                latencies.add((l >> shift) << shift);
            }
        }
        latencies.sort(null);
        out.append(",\"latency_count\":").append(latencies.size());
        if (!latencies.isEmpty()) {
            int n = latencies.size();
            out.append(",\"latency_p50_ms\":")
                    .append(latencies.get(Math.max((int) Math.ceil(0.5 * n), 1) - 1))
                    .append(",\"latency_p95_ms\":")
                    .append(latencies.get(Math.max((int) Math.ceil(0.95 * n), 1) - 1));
        }
        return out.append('}').toString();
    }

    static String valid(String model) {
        byte[] utf8 = model.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        return ModelNames.valid(utf8, 0, utf8.length);
    }

    /** Events over two windows, partly out of order, some sent twice; models from a pool. */
    static List<Event> events(long seed, int n, int models) {
        Random r = new Random(seed);
        List<Event> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            long time = 1_764_403_200_000L + (i * 2 * MIN / n) + r.nextInt(9_000) - 4_000;
            int pick = r.nextInt(models + 2);
            String model = pick == models ? null : pick == models + 1 ? "bad\u0001" : "m-" + pick;
            Event e = event(r, i, time, model);
            out.add(e);
            if (r.nextInt(8) == 0) {
                out.add(r.nextInt(out.size()), e);  // a copy, resent before or after
            }
        }
        return out;
    }

    @Test
    void theWindowsBreakdownIsThePlainComputationOfItsEvents() throws Exception {
        for (int seed = 0; seed < 20; seed++) {
            List<Event> events = events(seed, 400, seed % 2 == 0 ? 6 : 60);
            for (boolean dedup : new boolean[] {true, false}) {
                for (int perBatch : new int[] {1, 7, 512}) {
                    assertEquals(expected(events, dedup), run(events, perBatch, dedup),
                            "seed " + seed + ", batches of " + perBatch + ", dedup " + dedup);
                }
            }
        }
    }

    @Test
    void aCopyInTheSameRunTakesNoPlaceFromAnotherEventsAnchors() throws Exception {
        Random r = new Random(1);
        long t = 1_764_403_200_000L;
        Event a = event(r, 1, t, "m");
        while (a.topId().length < 3 || a.topDrift()[2] == 0.0) {
            a = event(r, 1, t, "m");
        }
        Event b = event(r, 2, t + 1, "m");
        while (b.topId().length == 0) {
            b = event(r, 2, t + 1, "m");
        }
        List<Event> events = List.of(a, a, b);
        assertEquals(expected(events, true), run(events, 512, true));
    }

    @Test
    void aThousandModelsStayBounded() throws Exception {
        List<Event> events = events(7, 3_000, 1_000);
        Map<Long, String> out = run(events, 512, true);
        assertEquals(expected(events, true), out);
        WindowBreakdown b = new WindowBreakdown();
        for (int m = 0; m < 1_000; m++) {
            b.modelSlot("m-" + m);
        }
        assertEquals(WindowBreakdown.MODELS_TRACKED, b.models);
        assertTrue(b.modelName.length <= WindowBreakdown.MODELS_TRACKED);
    }

    @Test
    void latencyBucketsAreBreakdownsBuckets() {
        for (int ms : new int[] {0, 1, 127, 128, 129, 255, 256, 1_840, 65_535, 3_600_000}) {
            int shift = Math.max(32 - Integer.numberOfLeadingZeros(ms) - 7, 0);
            int bucket = WindowBreakdown.latencyBucket(ms);
            assertTrue(bucket >= 0 && bucket < WindowBreakdown.LATENCY_BUCKETS);
            assertEquals((ms >> shift) << shift, WindowBreakdown.bucketLatency(bucket), "" + ms);
        }
        int previous = -1;
        for (int ms = 0; ms <= 3_600_000; ms++) {
            int bucket = WindowBreakdown.latencyBucket(ms);
            assertTrue(bucket == previous || bucket == previous + 1);
            previous = bucket;
        }
    }

    @Test
    void aWindowInStateFromBeforeTheBreakdownStillReads() throws Exception {
        // Format 1: the figures and ids, no breakdown.
        DataOutputSerializer out = new DataOutputSerializer(64);
        out.writeByte(1);
        out.writeLong(2);
        for (int i = 0; i < 3; i++) {
            out.writeDouble(0.5);
        }
        for (int i = 0; i < 4; i++) {
            out.writeLong(0);
        }
        out.writeDouble(0);
        out.writeInt(-1);
        out.writeInt(0);
        WindowFigures.Accumulator acc = AccumulatorSerializer.INSTANCE.deserialize(
                new DataInputDeserializer(out.getSharedBuffer(), 0, out.length()));
        assertEquals(2, acc.count);
        assertEquals(null, acc.breakdown);
        assertTrue(Arrays.asList(WindowFigures.Accumulator.class.getFields()).stream()
                .noneMatch(f -> f.getName().equals("breakdown")
                        && !java.lang.reflect.Modifier.isTransient(f.getModifiers())));
    }
}
