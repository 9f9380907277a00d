package io.github.cdcjoin.peers.flink;

import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;
import org.apache.flink.util.CloseableIterator;

/**
 * The Flink peer of cdcjoin's time-join benchmark ({@code bench/timebench}): Flink SQL's
 * event-time interval join of two append-only event streams, on an in-process MiniCluster with
 * the RocksDB state backend.
 *
 * <pre>
 * SELECT l.v AS lv, r.v AS rv FROM l [LEFT] JOIN r
 *   ON l.k = r.k AND r.ts BETWEEN l.ts + lower AND l.ts + upper
 * </pre>
 *
 * <p>Inputs: one file of JSON lines per side ({@code {"id":"…","k":"…","t":<epoch ms>,"v":"…"}}),
 * in the order cdcjoin consumed them; {@code ts = TO_TIMESTAMP_LTZ(t, 3)}, {@code WATERMARK FOR
 * ts AS ts - out_of_orderness}. A bounded source ends with the watermark at +infinity, so the
 * outer rows still waiting are emitted at the end (cdcjoin's {@code replay --end-of-input}).
 *
 * <p>Contract: prints one JSON object on stdout when the job finished ({@code
 * {"sink":…,"job_seconds":…,"submit_seconds":…,"parallelism":…}}, with {@code "rows"} under
 * {@code --sink collect}, which writes the rows to {@code --out} as {@code {"lv":…,"rv":…}}
 * lines). Interval joins are append-only: a retraction fails the run.
 */
public final class IntervalJoinPeer {

  private IntervalJoinPeer() {}

  public static void main(String[] args) {
    PeerMain.main(args, Args::parse, Args.USAGE, IntervalJoinPeer::run);
  }

  /** An interval in SQL, e.g. {@code - INTERVAL '0 00:00:10.000' DAY TO SECOND}. */
  static String interval(long ms) {
    String sign = ms < 0 ? "- " : "+ ";
    long abs = Math.abs(ms);
    return String.format(
        "%sINTERVAL '%d %02d:%02d:%02d.%03d' DAY TO SECOND",
        sign,
        abs / 86_400_000,
        abs / 3_600_000 % 24,
        abs / 60_000 % 60,
        abs / 1000 % 60,
        abs % 1000);
  }

  static String table(String name, Path file, long oooMs) {
    return "CREATE TABLE "
        + name
        + " (id STRING, k STRING, t BIGINT, v STRING, ts AS TO_TIMESTAMP_LTZ(t, 3),"
        + " WATERMARK FOR ts AS ts "
        + interval(-oooMs)
        + ") WITH ('connector' = 'filesystem', 'path' = '"
        + file.toAbsolutePath().toUri()
        + "', 'format' = 'json', 'json.ignore-parse-errors' = 'false')";
  }

  static void run(Args a, PrintStream out) throws Exception {
    Map<String, String> conf = new LinkedHashMap<>();
    conf.put("execution.runtime-mode", "STREAMING");
    conf.put("parallelism.default", Integer.toString(a.parallelism));
    conf.put("state.backend.type", "rocksdb");
    conf.put("state.backend.rocksdb.localdir", a.stateDir.toAbsolutePath().toString());
    conf.putAll(a.conf);
    Configuration configuration = Configuration.fromMap(conf);
    StreamExecutionEnvironment env =
        StreamExecutionEnvironment.getExecutionEnvironment(configuration);
    StreamTableEnvironment tEnv =
        StreamTableEnvironment.create(
            env,
            EnvironmentSettings.newInstance()
                .inStreamingMode()
                .withConfiguration(configuration)
                .build());
    tEnv.executeSql(table("l", a.left, a.oooMs));
    tEnv.executeSql(table("r", a.right, a.oooMs));
    String join =
        "SELECT l.v AS lv, r.v AS rv FROM l "
            + (a.left_outer ? "LEFT JOIN" : "JOIN")
            + " r ON l.k = r.k AND r.ts BETWEEN l.ts "
            + interval(a.lowerMs)
            + " AND l.ts "
            + interval(a.upperMs);

    long t0 = System.nanoTime();
    StringBuilder result = new StringBuilder();
    result.append("{\"sink\":\"").append(a.sink).append('"');
    JobClient job;
    if (a.sink.equals("blackhole")) {
      tEnv.executeSql("CREATE TABLE sink (lv STRING, rv STRING) WITH ('connector' = 'blackhole')");
      TableResult r = tEnv.executeSql("INSERT INTO sink " + join);
      job = r.getJobClient().orElseThrow();
    } else {
      TableResult r = tEnv.executeSql(join);
      job = r.getJobClient().orElseThrow();
      long rows = 0;
      try (CloseableIterator<Row> it = r.collect();
          Writer w =
              new BufferedWriter(
                  new OutputStreamWriter(Files.newOutputStream(a.out), StandardCharsets.UTF_8),
                  1 << 20)) {
        while (it.hasNext()) {
          Row row = it.next();
          if (row.getKind() != RowKind.INSERT) {
            throw new IllegalStateException("an interval join emitted " + row.getKind());
          }
          StringBuilder b = new StringBuilder(64).append("{\"lv\":");
          value(b, row.getField(0));
          b.append(",\"rv\":");
          value(b, row.getField(1));
          w.write(b.append("}\n").toString());
          rows++;
        }
      }
      result.append(",\"rows\":").append(rows);
    }
    JobExecutionResult jr = job.getJobExecutionResult().get();
    long t1 = System.nanoTime();
    result
        .append(",\"job_seconds\":")
        .append(jr.getNetRuntime(TimeUnit.MILLISECONDS) / 1e3)
        .append(",\"submit_seconds\":")
        .append((t1 - t0) / 1e9)
        .append(",\"parallelism\":")
        .append(a.parallelism)
        .append('}');
    out.println(result);
    out.flush();
  }

  static void value(StringBuilder b, Object v) {
    if (v == null) {
      b.append("null");
    } else {
      JoinPeer.quote(b, v.toString());
    }
  }

  /** Command-line arguments. */
  static final class Args {
    static final String USAGE =
        "usage: IntervalJoinPeer --left FILE --right FILE --lower-ms N --upper-ms N --ooo-ms N\n"
            + "         --state-dir DIR [--join inner|left] [--parallelism N]\n"
            + "         [--sink blackhole|collect] [--out FILE] [--conf KEY=VALUE]...";

    Path left, right, stateDir, out;
    long lowerMs, upperMs, oooMs;
    boolean left_outer;
    int parallelism = Runtime.getRuntime().availableProcessors();
    String sink = "blackhole";
    final Map<String, String> conf = new LinkedHashMap<>();

    static Args parse(String[] args) {
      Args a = new Args();
      List<String> rest = new ArrayList<>(List.of(args));
      boolean bounds = false;
      while (!rest.isEmpty()) {
        String flag = rest.remove(0);
        if (rest.isEmpty()) {
          throw new IllegalArgumentException(flag + " needs a value");
        }
        String v = rest.remove(0);
        switch (flag) {
          case "--left" -> a.left = Path.of(v);
          case "--right" -> a.right = Path.of(v);
          case "--state-dir" -> a.stateDir = Path.of(v);
          case "--out" -> a.out = Path.of(v);
          case "--lower-ms" -> a.lowerMs = Long.parseLong(v);
          case "--upper-ms" -> {
            a.upperMs = Long.parseLong(v);
            bounds = true;
          }
          case "--ooo-ms" -> a.oooMs = Long.parseLong(v);
          case "--join" -> {
            if (!v.equals("inner") && !v.equals("left")) {
              throw new IllegalArgumentException("--join " + v + ": use inner or left");
            }
            a.left_outer = v.equals("left");
          }
          case "--parallelism" -> a.parallelism = Integer.parseInt(v);
          case "--sink" -> a.sink = v;
          case "--conf" -> {
            int eq = v.indexOf('=');
            if (eq <= 0) {
              throw new IllegalArgumentException("--conf " + v + ": want KEY=VALUE");
            }
            a.conf.put(v.substring(0, eq), v.substring(eq + 1));
          }
          default -> throw new IllegalArgumentException("unknown flag " + flag);
        }
      }
      List<String> errs = new ArrayList<>();
      if (a.left == null || a.right == null || a.stateDir == null || !bounds) {
        errs.add("--left, --right, --upper-ms and --state-dir are required");
      }
      if (!a.sink.equals("blackhole") && !a.sink.equals("collect")) {
        errs.add("--sink " + a.sink + ": use blackhole or collect");
      }
      if (a.sink.equals("collect") && a.out == null) {
        errs.add("--sink collect needs --out FILE");
      }
      if (!errs.isEmpty()) {
        throw new IllegalArgumentException(String.join("; ", errs));
      }
      return a;
    }
  }
}
