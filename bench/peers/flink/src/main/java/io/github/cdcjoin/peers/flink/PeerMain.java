package io.github.cdcjoin.peers.flink;

import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Function;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;

/**
 * What the peers share: the command-line entry (parse the arguments, exit 2 with the usage on a
 * bad one; run the job, exit 1 on a failure; exit 0 — MiniCluster threads must not keep the JVM
 * alive), the flags every peer takes ({@link CommonArgs}), the table environment ({@link
 * #tableEnvironment}) and the one JSON object a peer prints ({@link #report}).
 */
final class PeerMain {

  /** A peer's job: its parsed arguments, stdout for its one JSON object. */
  interface Job<A> {
    void run(A args, PrintStream out) throws Exception;
  }

  /**
   * The sink's part of a peer's job: submits the job and returns its client, appending the
   * sink's own fields (e.g. {@code ,"rows":…}) to the result object.
   */
  interface Submit {
    JobClient submit(StringBuilder result) throws Exception;
  }

  private PeerMain() {}

  static <A> void main(String[] args, Function<String[], A> parse, String usage, Job<A> job) {
    A a;
    try {
      a = parse.apply(args);
    } catch (IllegalArgumentException e) {
      System.err.println("cdcjoin-flink-peer: " + e.getMessage());
      System.err.println(usage);
      System.exit(2);
      return;
    }
    try {
      job.run(a, System.out);
    } catch (Exception e) {
      System.err.println("cdcjoin-flink-peer: " + e);
      e.printStackTrace(System.err);
      System.exit(1);
    }
    System.exit(0);
  }

  /**
   * A streaming table environment on an in-process MiniCluster: the peers' settings (streaming
   * mode, a.parallelism, RocksDB state in a.stateDir), then the peer's own (extra), then
   * a.conf (--conf: the last word).
   */
  static StreamTableEnvironment tableEnvironment(CommonArgs a, Map<String, String> extra) {
    Map<String, String> conf = new LinkedHashMap<>();
    conf.put("execution.runtime-mode", "STREAMING");
    conf.put("parallelism.default", Integer.toString(a.parallelism));
    conf.put("state.backend.type", "rocksdb");
    conf.put("state.backend.rocksdb.localdir", a.stateDir.toAbsolutePath().toString());
    conf.putAll(extra);
    conf.putAll(a.conf);
    Configuration configuration = Configuration.fromMap(conf);
    StreamExecutionEnvironment env =
        StreamExecutionEnvironment.getExecutionEnvironment(configuration);
    return StreamTableEnvironment.create(
        env,
        EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(configuration).build());
  }

  /**
   * Runs the job submit submits and, when it finished, prints the peer's one JSON object on out:
   * {@code {"sink":…,<submit's fields>,"job_seconds":…,"submit_seconds":…,"parallelism":…}},
   * where job_seconds is Flink's own net runtime of the job (from its creation on the
   * MiniCluster to FINISHED) and submit_seconds the wall time from the submission (planning,
   * MiniCluster start) until the job finished.
   */
  static void report(PrintStream out, CommonArgs a, Submit submit) throws Exception {
    long t0 = System.nanoTime();
    StringBuilder result = new StringBuilder();
    result.append("{\"sink\":\"").append(a.sink).append('"');
    JobClient job = submit.submit(result);
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

  /**
   * The flags every peer takes: --state-dir DIR, --out FILE, --parallelism N (default: the
   * number of cores), --sink blackhole|collect (default blackhole; collect needs --out),
   * --conf KEY=VALUE (repeatable: any Flink option).
   */
  static class CommonArgs {
    Path stateDir, out;
    int parallelism = Runtime.getRuntime().availableProcessors();
    String sink = "blackhole";
    final Map<String, String> conf = new LinkedHashMap<>();

    /**
     * Parses args, every flag with a value: the common flags here, the others by own (which
     * throws IllegalArgumentException for a flag it does not know). -h and --help are errors
     * ("help requested": the usage is printed).
     */
    void parse(String[] args, BiConsumer<String, String> own) {
      List<String> rest = new ArrayList<>(List.of(args));
      while (!rest.isEmpty()) {
        String flag = rest.remove(0);
        if (flag.equals("-h") || flag.equals("--help")) {
          throw new IllegalArgumentException("help requested");
        }
        if (rest.isEmpty()) {
          throw new IllegalArgumentException(flag + " needs a value");
        }
        String v = rest.remove(0);
        switch (flag) {
          case "--state-dir" -> stateDir = Path.of(v);
          case "--out" -> out = Path.of(v);
          case "--parallelism" -> parallelism = Integer.parseInt(v);
          case "--sink" -> sink = v;
          case "--conf" -> {
            int eq = v.indexOf('=');
            if (eq <= 0) {
              throw new IllegalArgumentException("--conf " + v + ": want KEY=VALUE");
            }
            conf.put(v.substring(0, eq), v.substring(eq + 1));
          }
          default -> own.accept(flag, v);
        }
      }
    }

    /** Adds the problems of the common flags' values to errs. */
    void check(List<String> errs) {
      if (!sink.equals("blackhole") && !sink.equals("collect")) {
        errs.add("--sink " + sink + ": use blackhole or collect");
      }
      if (sink.equals("collect") && out == null) {
        errs.add("--sink collect needs --out FILE");
      }
    }

    /** Throws the problems in errs (none: returns). */
    static void fail(List<String> errs) {
      if (!errs.isEmpty()) {
        throw new IllegalArgumentException(String.join("; ", errs));
      }
    }
  }
}
