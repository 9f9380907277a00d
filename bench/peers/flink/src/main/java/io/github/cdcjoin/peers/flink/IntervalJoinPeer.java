package io.github.cdcjoin.peers.flink;

import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.flink.core.execution.JobClient;
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
    StreamTableEnvironment tEnv = PeerMain.tableEnvironment(a, Map.of());
    tEnv.executeSql(table("l", a.left, a.oooMs));
    tEnv.executeSql(table("r", a.right, a.oooMs));
    String join =
        "SELECT l.v AS lv, r.v AS rv FROM l "
            + (a.left_outer ? "LEFT JOIN" : "JOIN")
            + " r ON l.k = r.k AND r.ts BETWEEN l.ts "
            + interval(a.lowerMs)
            + " AND l.ts "
            + interval(a.upperMs);

    PeerMain.report(
        out,
        a,
        result -> {
          if (a.sink.equals("blackhole")) {
            tEnv.executeSql(
                "CREATE TABLE sink (lv STRING, rv STRING) WITH ('connector' = 'blackhole')");
            return tEnv.executeSql("INSERT INTO sink " + join).getJobClient().orElseThrow();
          }
          TableResult r = tEnv.executeSql(join);
          JobClient job = r.getJobClient().orElseThrow();
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
          return job;
        });
  }

  static void value(StringBuilder b, Object v) {
    if (v == null) {
      b.append("null");
    } else {
      JoinPeer.quote(b, v.toString());
    }
  }

  /** Command-line arguments. */
  static final class Args extends PeerMain.CommonArgs {
    static final String USAGE =
        "usage: IntervalJoinPeer --left FILE --right FILE --lower-ms N --upper-ms N --ooo-ms N\n"
            + "         --state-dir DIR [--join inner|left] [--parallelism N]\n"
            + "         [--sink blackhole|collect] [--out FILE] [--conf KEY=VALUE]...";

    Path left, right;
    long lowerMs, upperMs, oooMs;
    boolean left_outer;
    private boolean bounds;

    static Args parse(String[] args) {
      Args a = new Args();
      a.parse(
          args,
          (flag, v) -> {
            switch (flag) {
              case "--left" -> a.left = Path.of(v);
              case "--right" -> a.right = Path.of(v);
              case "--lower-ms" -> a.lowerMs = Long.parseLong(v);
              case "--upper-ms" -> {
                a.upperMs = Long.parseLong(v);
                a.bounds = true;
              }
              case "--ooo-ms" -> a.oooMs = Long.parseLong(v);
              case "--join" -> {
                if (!v.equals("inner") && !v.equals("left")) {
                  throw new IllegalArgumentException("--join " + v + ": use inner or left");
                }
                a.left_outer = v.equals("left");
              }
              default -> throw new IllegalArgumentException("unknown flag " + flag);
            }
          });
      List<String> errs = new ArrayList<>();
      if (a.left == null || a.right == null || a.stateDir == null || !a.bounds) {
        errs.add("--left, --right, --upper-ms and --state-dir are required");
      }
      a.check(errs);
      fail(errs);
      return a;
    }
  }
}
