package io.github.cdcjoin.peers.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;

/**
 * The Kafka Streams peer of cdcjoin's time-join benchmark ({@code bench/timebench}): a
 * stream-stream join with {@code JoinWindows.ofTimeDifferenceAndGrace(d, g)} (the interval
 * [-d, +d] with g of lateness, on stream time), driven in process by a TopologyTestDriver with
 * RocksDB window stores (Kafka Streams' defaults; no broker).
 *
 * <p>Input: one file of JSON lines in consumption order, {@code
 * {"side":"l"|"r","id":"…","k":"…","t":<epoch ms>,"v":"…"}}; each record is piped with its key
 * k and timestamp t. Output ({@code --out}): the joined rows as {@code {"lv":…,"rv":…}} lines.
 * Prints {@code {"job_seconds":…,"records":…,"rows":…}} on stdout (job_seconds: piping every record
 * through the topology, reading the output included).
 *
 * <p>Arguments: --input FILE --difference-ms D --grace-ms G --out FILE [--state-dir DIR]
 */
public final class JoinWindowsPeer {
  public static void main(String[] args) throws Exception {
    Map<String, String> a = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      a.put(args[i], args[i + 1]);
    }
    for (String req : new String[] {"--input", "--difference-ms", "--grace-ms", "--out"}) {
      if (!a.containsKey(req)) {
        System.err.println("JoinWindowsPeer: " + req + " is required");
        System.exit(2);
      }
    }
    long d = Long.parseLong(a.get("--difference-ms"));
    long g = Long.parseLong(a.get("--grace-ms"));

    StreamsBuilder b = new StreamsBuilder();
    KStream<String, String> l = b.stream("left", Consumed.with(Serdes.String(), Serdes.String()));
    KStream<String, String> r = b.stream("right", Consumed.with(Serdes.String(), Serdes.String()));
    l.join(
            r,
            (lv, rv) -> lv + "\t" + rv,
            JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(d), Duration.ofMillis(g)),
            StreamJoined.with(Serdes.String(), Serdes.String(), Serdes.String()))
        .to("out", Produced.with(Serdes.String(), Serdes.String()));

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, "cdcjoin-joinwindows-peer");
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
    p.put(StreamsConfig.STATE_DIR_CONFIG, a.getOrDefault("--state-dir", Files.createTempDirectory("kstreams").toString()));

    ObjectMapper json = new ObjectMapper();
    long records = 0, rows = 0;
    long t0 = System.nanoTime();
    try (TopologyTestDriver driver = new TopologyTestDriver(b.build(), p);
        BufferedReader in = Files.newBufferedReader(Path.of(a.get("--input")), StandardCharsets.UTF_8);
        Writer w =
            new BufferedWriter(
                new OutputStreamWriter(Files.newOutputStream(Path.of(a.get("--out"))), StandardCharsets.UTF_8),
                1 << 20)) {
      StringSerializer ss = new StringSerializer();
      TestInputTopic<String, String> left = driver.createInputTopic("left", ss, ss);
      TestInputTopic<String, String> right = driver.createInputTopic("right", ss, ss);
      StringDeserializer sd = new StringDeserializer();
      TestOutputTopic<String, String> out = driver.createOutputTopic("out", sd, sd);
      String line;
      while ((line = in.readLine()) != null) {
        if (line.isEmpty()) {
          continue;
        }
        JsonNode n = json.readTree(line);
        Instant ts = Instant.ofEpochMilli(n.get("t").asLong());
        String k = n.get("k").asText(), v = n.get("v").asText();
        (n.get("side").asText().equals("l") ? left : right).pipeInput(k, v, ts);
        if (++records % 10_000 == 0) {
          rows += drain(out, w);
        }
      }
      rows += drain(out, w);
    }
    long t1 = System.nanoTime();
    System.out.println("{\"job_seconds\":" + (t1 - t0) / 1e9 + ",\"records\":" + records + ",\"rows\":" + rows + "}");
  }

  static long drain(TestOutputTopic<String, String> out, Writer w) throws java.io.IOException {
    long n = 0;
    for (String v : out.readValuesToList()) {
      int tab = v.indexOf('\t');
      w.write("{\"lv\":\"" + v.substring(0, tab) + "\",\"rv\":\"" + v.substring(tab + 1) + "\"}\n");
      n++;
    }
    return n;
  }
}
