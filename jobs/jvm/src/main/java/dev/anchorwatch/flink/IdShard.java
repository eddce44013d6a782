package dev.anchorwatch.flink;

import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * {@code id_shard(event_id, shards)}: which of {@code shards} shards an event id belongs to,
 * in [0, shards). A function of the id alone, so every copy of an event is in its original's
 * shard. Flink's own hash of the string's bytes: nothing to allocate.
 */
public final class IdShard extends ScalarFunction {

    private static final long serialVersionUID = 1L;

    public int eval(
            @DataTypeHint(value = "STRING", bridgedTo = StringData.class) StringData eventId,
            int shards) {
        return Math.floorMod(eventId.hashCode(), shards);
    }
}
