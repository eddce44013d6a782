package dev.anchorwatch.flink;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataOutputView;

/**
 * One window's breakdown (anchorwatch/contracts/breakdown.py), counted event by event in
 * arrival order next to its {@link WindowFigures.Accumulator}: per anchor kind the anchors,
 * the sum of count x mean and the max; the five best anchors; the first {@link
 * #MODELS_TRACKED} distinct models (the unknown model is one) with their requests and drift
 * sums, the rest as "other"; latencies counted per bucket. Bounded whatever the events
 * carry: 8 kinds, 5 anchors of at most 200 characters, 32 model names of at most 128, at
 * most {@link #LATENCY_BUCKETS} counters, each part allocated when first needed.
 */
final class WindowBreakdown {

    static final int TOP = 5;
    /** breakdown.MODELS_TRACKED_PER_WINDOW. */
    static final int MODELS_TRACKED = 32;
    /** breakdown.TOP_MODELS_PER_WINDOW. */
    static final int MODELS_LISTED = 5;
    /** Latency buckets (breakdown.latency_bucket): 128 exact, then 64 per power of two. */
    static final int LATENCY_BUCKETS = 128 + 15 * 64;

    private static final int KINDS = EventBreakdown.KIND_COUNT;
    private static final int GROUP = 64;

    // Kinds (null until an event has one).
    long[] kindAnchors;
    double[] kindWeighted;
    double[] kindMax;

    // The best anchors, in order (TopOrder).
    int top;
    double[] topDrift;
    long[] topPosition;
    byte[][] topId;
    byte[][] topEventId;

    // Models tracked, in the order first seen; name null: the unknown model.
    int models;
    String[] modelName;
    long[] modelRequests;
    double[] modelDriftSum;
    long otherRequests;
    double otherDriftSum;

    // Latencies: requests per bucket, in groups of 64 buckets allocated when first hit.
    long latencyCount;
    int[][] latencyGroups;

    /** Counts event k of batch b; {@code modelSlot}: its model's slot, -1 for other. */
    void add(DriftBatch b, int k, int modelSlot) {
        int mask = b.kindMask[k] & 0xFF;
        if (mask != 0) {
            addKinds(b, b.kindFirst[k], mask);
        }
        double drift = b.meanDrift[k];
        if (modelSlot >= 0) {
            modelRequests[modelSlot]++;
            modelDriftSum[modelSlot] += drift;
        } else {
            otherRequests++;
            otherDriftSum += drift;
        }
        int latency = b.latencyMs[k];
        if (latency >= 0) {
            addLatency(latency);
        }
    }

    private void addKinds(DriftBatch b, int e, int mask) {
        if (kindAnchors == null) {
            kindAnchors = new long[KINDS];
            kindWeighted = new double[KINDS];
            kindMax = new double[KINDS];
        }
        for (int kind = 0; kind < KINDS; kind++) {
            if ((mask & (1 << kind)) != 0) {
                int n = b.kindCount[e];
                double max = b.kindMax[e];
                // sum(count * mean) / sum(count), in arrival order; the max of the maxes
                // (the first of equals, as Python's max keeps).
                kindWeighted[kind] += n * b.kindMean[e];
                if (kindAnchors[kind] == 0 || max > kindMax[kind]) {
                    kindMax[kind] = max;
                }
                kindAnchors[kind] += n;
                e++;
            }
        }
    }

    /** The slot of the model named {@code name} (null: unknown), -1 when it goes to other. */
    int modelSlot(String name) {
        for (int i = 0; i < models; i++) {
            if (name == null ? modelName[i] == null : name.equals(modelName[i])) {
                return i;
            }
        }
        if (models == MODELS_TRACKED) {
            return -1;
        }
        if (modelName == null || models == modelName.length) {
            int capacity = modelName == null ? 4 : Math.min(2 * models, MODELS_TRACKED);
            modelName = modelName == null ? new String[capacity] : Arrays.copyOf(modelName, capacity);
            modelRequests = modelRequests == null
                    ? new long[capacity] : Arrays.copyOf(modelRequests, capacity);
            modelDriftSum = modelDriftSum == null
                    ? new double[capacity] : Arrays.copyOf(modelDriftSum, capacity);
        }
        modelName[models] = name;
        return models++;
    }

    /** Bucket of a latency (0 to an hour): its lowest latency is breakdown.latency_bucket's. */
    static int latencyBucket(int ms) {
        if (ms < 128) {
            return ms;
        }
        int shift = 32 - Integer.numberOfLeadingZeros(ms) - 7;
        return 128 + (shift - 1) * GROUP + ((ms >> shift) - GROUP);
    }

    /** The lowest latency of a bucket. */
    static int bucketLatency(int bucket) {
        if (bucket < 128) {
            return bucket;
        }
        int shift = (bucket - 128) / GROUP + 1;
        return (GROUP + (bucket - 128) % GROUP) << shift;
    }

    private void addLatency(int ms) {
        if (latencyGroups == null) {
            latencyGroups = new int[LATENCY_BUCKETS / GROUP][];
        }
        int bucket = latencyBucket(ms);
        int[] group = latencyGroups[bucket / GROUP];
        if (group == null) {
            group = latencyGroups[bucket / GROUP] = new int[GROUP];
        }
        group[bucket % GROUP] = Math.addExact(group[bucket % GROUP], 1);
        latencyCount++;
    }

    /** Nearest-rank {@code q} quantile over the bucketed latencies (latencyCount > 0). */
    int latencyQuantile(double q) {
        long rank = Math.max((long) Math.ceil(q * latencyCount), 1);
        long seen = 0;
        for (int g = 0; g < latencyGroups.length; g++) {
            int[] group = latencyGroups[g];
            if (group == null) {
                continue;
            }
            for (int i = 0; i < GROUP; i++) {
                seen += group[i];
                if (seen >= rank) {
                    return bucketLatency(g * GROUP + i);
                }
            }
        }
        throw new IllegalStateException("latency rank past the count");
    }

    /** Offers candidate c of batch b (its event counted here) to the best five. */
    void offer(DriftBatch b, int c) {
        if (topId == null) {
            topDrift = new double[TOP];
            topPosition = new long[TOP];
            topId = new byte[TOP][];
            topEventId = new byte[TOP][];
        }
        byte[] id = b.candId[c];
        int at = TopOrder.place(topDrift, topPosition, topId, 0, top, b.candDrift[c],
                b.candPosition[c], id, 0, id.length);
        if (at == TOP) {
            return;
        }
        int last = top == TOP ? TOP - 1 : top++;
        for (int i = last; i > at; i--) {
            topDrift[i] = topDrift[i - 1];
            topPosition[i] = topPosition[i - 1];
            topId[i] = topId[i - 1];
            topEventId[i] = topEventId[i - 1];
        }
        topDrift[at] = b.candDrift[c];
        topPosition[at] = b.candPosition[c];
        topId[at] = id;
        topEventId[at] = b.candEventId[c];
    }

    /**
     * The breakdown as the JSON object jobs/drift_job.py reads into the WindowAggregate:
     * kinds (in KINDS order, those present), top_anchors, models (the five with most
     * requests, then by name, the unknown model last), other_models (the rest, tracked or
     * not; absent when there is none), latency_count, and latency_p50_ms / latency_p95_ms
     * when a request had a latency.
     *
     * <p>other_models: model_count is the tracked models not listed plus one per request of
     * an untracked model (more than the distinct models when some went untracked: their
     * names were not kept); its mean drift is the drift sums of the tracked models not
     * listed, in the order first seen, then of the untracked requests, over its requests.
     */
    String toJson() {
        StringBuilder out = new StringBuilder(512);
        out.append("{\"kinds\":{");
        boolean first = true;
        for (int k = 0; kindAnchors != null && k < KINDS; k++) {
            if (kindAnchors[k] > 0) {
                out.append(first ? "" : ",").append('"').append(EventBreakdown.KINDS[k])
                        .append("\":{\"anchor_count\":").append(kindAnchors[k])
                        .append(",\"mean_drift\":");
                JsonText.number(out, kindWeighted[k] / kindAnchors[k]);
                out.append(",\"max_drift\":");
                JsonText.number(out, kindMax[k]);
                out.append('}');
                first = false;
            }
        }
        out.append("},\"top_anchors\":[");
        for (int i = 0; i < top; i++) {
            out.append(i == 0 ? "{" : ",{").append("\"anchor_id\":");
            JsonText.string(out, new String(topId[i], StandardCharsets.UTF_8));
            out.append(",\"position\":").append(topPosition[i]).append(",\"drift_score\":");
            JsonText.number(out, topDrift[i]);
            if (topEventId[i] != null) {
                out.append(",\"event_id\":");
                JsonText.string(out, new String(topEventId[i], StandardCharsets.UTF_8));
            }
            out.append('}');
        }
        out.append("],\"models\":[");
        Integer[] order = new Integer[models];
        for (int i = 0; i < models; i++) {
            order[i] = i;
        }
        Arrays.sort(order, this::listOrder);
        int listed = Math.min(models, MODELS_LISTED);
        boolean[] isListed = new boolean[models];
        for (int n = 0; n < listed; n++) {
            int i = order[n];
            isListed[i] = true;
            out.append(n == 0 ? "{" : ",{").append("\"model\":");
            JsonText.nullable(out, modelName[i]);
            out.append(",\"request_count\":").append(modelRequests[i]).append(",\"mean_drift\":");
            JsonText.number(out, modelDriftSum[i] / modelRequests[i]);
            out.append('}');
        }
        out.append(']');
        long requests = otherRequests;
        double sum = 0.0;
        for (int i = 0; i < models; i++) {
            if (!isListed[i]) {
                requests += modelRequests[i];
                sum += modelDriftSum[i];
            }
        }
        if (requests > 0) {
            sum += otherDriftSum;
            out.append(",\"other_models\":{\"model_count\":")
                    .append(models - listed + otherRequests)
                    .append(",\"request_count\":").append(requests).append(",\"mean_drift\":");
            JsonText.number(out, sum / requests);
            out.append('}');
        }
        out.append(",\"latency_count\":").append(latencyCount);
        if (latencyCount > 0) {
            out.append(",\"latency_p50_ms\":").append(latencyQuantile(0.5))
                    .append(",\"latency_p95_ms\":").append(latencyQuantile(0.95));
        }
        return out.append('}').toString();
    }

    /** Most requests first, then by name (code point order), the unknown model last. */
    private int listOrder(int a, int b) {
        if (modelRequests[a] != modelRequests[b]) {
            return modelRequests[a] > modelRequests[b] ? -1 : 1;
        }
        String x = modelName[a];
        String y = modelName[b];
        if (x == null || y == null) {
            return x == null ? (y == null ? 0 : 1) : -1;
        }
        return compareCodePoints(x, y);
    }

    static int compareCodePoints(String a, String b) {
        int i = 0;
        int j = 0;
        while (i < a.length() && j < b.length()) {
            int x = a.codePointAt(i);
            int y = b.codePointAt(j);
            if (x != y) {
                return x < y ? -1 : 1;
            }
            i += Character.charCount(x);
            j += Character.charCount(y);
        }
        return i < a.length() ? 1 : (j < b.length() ? -1 : 0);
    }

    /** A copy sharing nothing that changes (names and ids are never changed in place). */
    WindowBreakdown copy() {
        WindowBreakdown to = new WindowBreakdown();
        to.kindAnchors = kindAnchors == null ? null : kindAnchors.clone();
        to.kindWeighted = kindWeighted == null ? null : kindWeighted.clone();
        to.kindMax = kindMax == null ? null : kindMax.clone();
        to.top = top;
        to.topDrift = topDrift == null ? null : topDrift.clone();
        to.topPosition = topPosition == null ? null : topPosition.clone();
        to.topId = topId == null ? null : topId.clone();
        to.topEventId = topEventId == null ? null : topEventId.clone();
        to.models = models;
        to.modelName = modelName == null ? null : modelName.clone();
        to.modelRequests = modelRequests == null ? null : modelRequests.clone();
        to.modelDriftSum = modelDriftSum == null ? null : modelDriftSum.clone();
        to.otherRequests = otherRequests;
        to.otherDriftSum = otherDriftSum;
        to.latencyCount = latencyCount;
        if (latencyGroups != null) {
            to.latencyGroups = new int[latencyGroups.length][];
            for (int g = 0; g < latencyGroups.length; g++) {
                to.latencyGroups[g] = latencyGroups[g] == null ? null : latencyGroups[g].clone();
            }
        }
        return to;
    }

    /** State and checkpoints: each part, only what it holds. */
    void write(DataOutputView out) throws IOException {
        out.writeBoolean(kindAnchors != null);
        if (kindAnchors != null) {
            for (int k = 0; k < KINDS; k++) {
                out.writeLong(kindAnchors[k]);
                out.writeDouble(kindWeighted[k]);
                out.writeDouble(kindMax[k]);
            }
        }
        out.writeInt(top);
        for (int i = 0; i < top; i++) {
            out.writeDouble(topDrift[i]);
            out.writeLong(topPosition[i]);
            writeBytes(out, topId[i]);
            writeBytes(out, topEventId[i]);
        }
        out.writeInt(models);
        for (int i = 0; i < models; i++) {
            writeBytes(out, modelName[i] == null
                    ? null : modelName[i].getBytes(StandardCharsets.UTF_8));
            out.writeLong(modelRequests[i]);
            out.writeDouble(modelDriftSum[i]);
        }
        out.writeLong(otherRequests);
        out.writeDouble(otherDriftSum);
        out.writeLong(latencyCount);
        int hit = 0;
        for (int b = 0; latencyGroups != null && b < LATENCY_BUCKETS; b++) {
            hit += latencyAt(b) == 0 ? 0 : 1;
        }
        out.writeInt(hit);
        for (int b = 0; hit > 0 && b < LATENCY_BUCKETS; b++) {
            int n = latencyAt(b);
            if (n != 0) {
                out.writeShort(b);
                out.writeInt(n);
            }
        }
    }

    private int latencyAt(int bucket) {
        int[] group = latencyGroups[bucket / GROUP];
        return group == null ? 0 : group[bucket % GROUP];
    }

    static WindowBreakdown read(DataInputView in) throws IOException {
        WindowBreakdown b = new WindowBreakdown();
        if (in.readBoolean()) {
            b.kindAnchors = new long[KINDS];
            b.kindWeighted = new double[KINDS];
            b.kindMax = new double[KINDS];
            for (int k = 0; k < KINDS; k++) {
                b.kindAnchors[k] = in.readLong();
                b.kindWeighted[k] = in.readDouble();
                b.kindMax[k] = in.readDouble();
            }
        }
        int top = in.readInt();
        if (top > 0) {
            b.topDrift = new double[TOP];
            b.topPosition = new long[TOP];
            b.topId = new byte[TOP][];
            b.topEventId = new byte[TOP][];
        }
        for (int i = 0; i < top; i++) {
            b.topDrift[i] = in.readDouble();
            b.topPosition[i] = in.readLong();
            b.topId[i] = readBytes(in);
            b.topEventId[i] = readBytes(in);
        }
        b.top = top;
        int models = in.readInt();
        if (models > 0) {
            b.modelName = new String[models];
            b.modelRequests = new long[models];
            b.modelDriftSum = new double[models];
        }
        for (int i = 0; i < models; i++) {
            byte[] name = readBytes(in);
            b.modelName[i] = name == null ? null : new String(name, StandardCharsets.UTF_8);
            b.modelRequests[i] = in.readLong();
            b.modelDriftSum[i] = in.readDouble();
        }
        b.models = models;
        b.otherRequests = in.readLong();
        b.otherDriftSum = in.readDouble();
        b.latencyCount = in.readLong();
        int hit = in.readInt();
        if (hit > 0) {
            b.latencyGroups = new int[LATENCY_BUCKETS / GROUP][];
        }
        for (int i = 0; i < hit; i++) {
            int bucket = in.readShort();
            int[] group = b.latencyGroups[bucket / GROUP];
            if (group == null) {
                group = b.latencyGroups[bucket / GROUP] = new int[GROUP];
            }
            group[bucket % GROUP] = in.readInt();
        }
        return b;
    }

    /** A byte string or null, length-prefixed (-1: null); DriftBatch's serializer uses it too. */
    static void writeBytes(DataOutputView out, byte[] bytes) throws IOException {
        out.writeInt(bytes == null ? -1 : bytes.length);
        if (bytes != null) {
            out.write(bytes);
        }
    }

    static byte[] readBytes(DataInputView in) throws IOException {
        int length = in.readInt();
        if (length < 0) {
            return null;
        }
        byte[] bytes = new byte[length];
        in.readFully(bytes);
        return bytes;
    }
}
