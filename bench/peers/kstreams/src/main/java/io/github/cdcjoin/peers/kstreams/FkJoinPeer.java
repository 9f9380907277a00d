package io.github.cdcjoin.peers.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The users ⋈ domains foreign-key join of cdcjoin's benchmark in Kafka Streams: both Debezium
 * topics read as KTables keyed by their primary key, {@code domains.join(users, d -> d.user_id,
 * joiner)} (KIP-213's foreign-key join: subscription and response topics, no repartition of the
 * users), the joined rows written to an output topic keyed by the domain's key (a tombstone when
 * a row leaves the join). It runs until it is stopped (SIGTERM); brokercost measures it from
 * outside by the application's committed offsets.
 *
 * <p>Arguments: --bootstrap H:P --users TOPIC --domains TOPIC --output TOPIC --app-id ID
 * [--guarantee exactly_once_v2|at_least_once] [--threads N] [--state-dir DIR] [--config K=V]…
 */
public final class FkJoinPeer {
  public static void main(String[] args) throws Exception {
    Map<String, String> a = new HashMap<>();
    Properties extra = new Properties();
    for (int i = 0; i + 1 < args.length; i += 2) {
      if (args[i].equals("--config")) {
        String[] kv = args[i + 1].split("=", 2);
        extra.setProperty(kv[0], kv[1]);
      } else {
        a.put(args[i], args[i + 1]);
      }
    }
    for (String req : new String[] {"--bootstrap", "--users", "--domains", "--output", "--app-id"}) {
      if (!a.containsKey(req)) {
        System.err.println("FkJoinPeer: " + req + " is required");
        System.exit(2);
      }
    }
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("--app-id"));
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, a.getOrDefault("--guarantee", StreamsConfig.EXACTLY_ONCE_V2));
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a.getOrDefault("--threads", String.valueOf(Runtime.getRuntime().availableProcessors())));
    p.put(StreamsConfig.STATE_DIR_CONFIG, a.getOrDefault("--state-dir", System.getProperty("java.io.tmpdir") + "/kstreams-peer"));
    p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
    p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    p.putAll(extra);

    StreamsBuilder b = new StreamsBuilder();
    KTable<Long, ObjectNode> users =
        b.table(a.get("--users"), Consumed.with(Debezium.idKey(), Debezium.row("id", "firstname", "lastname")));
    KTable<Long, ObjectNode> domains =
        b.table(a.get("--domains"), Consumed.with(Debezium.idKey(), Debezium.row("id", "user_id", "domain_name")));
    KTable<Long, ObjectNode> joined =
        domains.join(
            users,
            d -> {
              JsonNode fk = d.get("user_id");
              return fk == null || fk.isNull() ? null : fk.asLong();
            },
            (d, u) -> {
              ObjectNode o = Debezium.JSON.createObjectNode();
              o.set("user_id", u.get("id"));
              o.set("firstname", u.get("firstname"));
              o.set("lastname", u.get("lastname"));
              o.set("domain_id", d.get("id"));
              o.set("domain_name", d.get("domain_name"));
              return o;
            });
    joined.toStream().to(a.get("--output"), Produced.with(Debezium.idKey(), Debezium.json()));

    KafkaStreams streams = new KafkaStreams(b.build(p), p);
    CountDownLatch done = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.RUNNING) {
            System.out.println("running");
            System.out.flush();
          }
          if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
            done.countDown();
          }
        });
    streams.setUncaughtExceptionHandler(
        e -> {
          e.printStackTrace();
          return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      done.countDown();
    }));
    streams.start();
    done.await();
    if (streams.state() == KafkaStreams.State.ERROR) {
      System.exit(1);
    }
  }
}
