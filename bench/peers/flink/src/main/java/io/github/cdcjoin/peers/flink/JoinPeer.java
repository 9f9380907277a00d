package io.github.cdcjoin.peers.flink;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.core.execution.JobClient;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;
import org.apache.flink.util.CloseableIterator;

/**
 * The Flink peer of {@code cdcjoin bench}: Flink SQL's regular join of the benchmark's users and
 * domains tables, read as {@code debezium-json} files (schemas off, one file per source
 * partition), on an in-process MiniCluster with the RocksDB state backend.
 *
 * <p>Contract: prints exactly one JSON object on stdout when the job finished, e.g. {@code
 * {"sink":"blackhole","job_seconds":12.3,"submit_seconds":13.1,"parallelism":2}}, where
 * {@code job_seconds} is Flink's own net runtime of the job (from its creation on the
 * MiniCluster to FINISHED) and {@code submit_seconds} the wall time from submitting the SQL
 * statement (planning, MiniCluster start) until the job finished. With {@code --sink collect}
 * it also writes the final join to {@code --out}, one JSON object per row keyed by the
 * benchmark's select names (the shape of {@code cdcjoin replay --final}), and adds {@code
 * "rows"} and {@code "changes"}. Exits 2 on bad arguments, 1 when the job fails or the
 * changelog it produced does not fold into a set of rows.
 */
public final class JoinPeer {

  /** The benchmark's select list, in output order (bench/engine.go's jobYAML). */
  static final String[] NAMES = {"user_id", "firstname", "lastname", "domain_id", "domain_name"};

  static final String JOIN =
      "SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name\n"
          + "FROM users u JOIN domains d ON d.user_id = u.id";

  /** The three-table chain's select list (bench/plan.go's ChainQuery), with --dns-records. */
  static final String[] CHAIN_NAMES = {
    "user_id", "firstname", "lastname", "domain_id", "domain_name", "record_id", "rtype", "ttl"
  };

  static final String CHAIN =
      "SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name,\n"
          + "       r.id AS record_id, r.rtype, r.ttl\n"
          + "FROM users u JOIN domains d ON d.user_id = u.id\n"
          + "JOIN dns_records r ON r.domain_id = d.id";

  private JoinPeer() {}

  public static void main(String[] args) {
    PeerMain.main(args, Args::parse, Args.USAGE, JoinPeer::run);
  }

  static void run(Args a, PrintStream out) throws Exception {
    // Debezium delivers at least once (connector restarts, snapshot reruns): without this,
    // Flink SQL double-counts redelivered rows. It needs the PRIMARY KEYs declared below and
    // adds a ChangelogNormalize operator (keyed state of the last row per key) per source.
    StreamTableEnvironment tEnv =
        PeerMain.tableEnvironment(a, Map.of("table.exec.source.cdc-events-duplicate", "true"));

    tEnv.executeSql(
        "CREATE TABLE users (\n"
            + "  id BIGINT NOT NULL, firstname STRING, lastname STRING,\n"
            + "  PRIMARY KEY (id) NOT ENFORCED\n"
            + ") WITH ("
            + source(a.users)
            + ")");
    tEnv.executeSql(
        "CREATE TABLE domains (\n"
            + "  id BIGINT NOT NULL, user_id BIGINT, domain_name STRING,\n"
            + "  PRIMARY KEY (id) NOT ENFORCED\n"
            + ") WITH ("
            + source(a.domains)
            + ")");
    boolean chain = a.records != null;
    String[] names = chain ? CHAIN_NAMES : NAMES;
    String query = chain ? CHAIN : JOIN;
    if (chain) {
      tEnv.executeSql(
          "CREATE TABLE dns_records (\n"
              + "  id BIGINT NOT NULL, domain_id BIGINT, rtype STRING, ttl INT,\n"
              + "  PRIMARY KEY (id) NOT ENFORCED\n"
              + ") WITH ("
              + source(a.records)
              + ")");
    }

    PeerMain.report(
        out,
        a,
        result -> {
          if (a.sink.equals("blackhole")) {
            tEnv.executeSql(
                "CREATE TABLE sink (user_id BIGINT, firstname STRING, lastname STRING,"
                    + " domain_id BIGINT, domain_name STRING"
                    + (chain ? ", record_id BIGINT, rtype STRING, ttl INT" : "")
                    + ") WITH ('connector' = 'blackhole')");
            return tEnv.executeSql("INSERT INTO sink " + query).getJobClient().orElseThrow();
          }
          TableResult r = tEnv.executeSql(query);
          JobClient job = r.getJobClient().orElseThrow();
          Fold fold = new Fold(names);
          try (CloseableIterator<Row> it = r.collect()) {
            while (it.hasNext()) {
              fold.apply(it.next());
            }
          }
          fold.write(a.out);
          result
              .append(",\"rows\":")
              .append(fold.rows())
              .append(",\"changes\":")
              .append(fold.changes);
          return job;
        });
  }

  /** The WITH options of a bounded debezium-json file source on dir. */
  static String source(Path dir) {
    return "'connector' = 'filesystem', 'path' = '"
        + dir.toAbsolutePath().toUri()
        + "', 'format' = 'debezium-json', 'debezium-json.schema-include' = 'false',"
        + " 'debezium-json.ignore-parse-errors' = 'false'";
  }

  /**
   * Fold applies a changelog (+I, -U, +U, -D) to a multiset of rows: the final join. A
   * retraction of a row that is not there is an error: a correct changelog never does that.
   */
  static final class Fold {
    final Map<String, Integer> rows = new HashMap<>();
    final String[] names;
    long changes;

    Fold(String[] names) {
      this.names = names;
    }

    void apply(Row r) {
      changes++;
      String line = json(r, names);
      int d = (r.getKind() == RowKind.INSERT || r.getKind() == RowKind.UPDATE_AFTER) ? 1 : -1;
      int n = rows.getOrDefault(line, 0) + d;
      if (n < 0) {
        throw new IllegalStateException("retraction of a row not in the result: " + line);
      }
      if (n == 0) {
        rows.remove(line);
      } else {
        rows.put(line, n);
      }
    }

    long rows() {
      long n = 0;
      for (int c : rows.values()) {
        n += c;
      }
      return n;
    }

    /** Writes the rows sorted (by their JSON text), duplicates repeated. */
    void write(Path path) throws IOException {
      TreeMap<String, Integer> sorted = new TreeMap<>(rows);
      try (Writer w =
          new BufferedWriter(
              new OutputStreamWriter(Files.newOutputStream(path), StandardCharsets.UTF_8),
              1 << 20)) {
        for (Map.Entry<String, Integer> e : sorted.entrySet()) {
          for (int i = 0; i < e.getValue(); i++) {
            w.write(e.getKey());
            w.write('\n');
          }
        }
      }
    }
  }

  /** Renders r as a JSON object keyed by names. */
  static String json(Row r, String[] names) {
    StringBuilder b = new StringBuilder(128).append('{');
    for (int i = 0; i < names.length; i++) {
      if (i > 0) {
        b.append(',');
      }
      b.append('"').append(names[i]).append("\":");
      Object v = r.getField(i);
      if (v == null) {
        b.append("null");
      } else if (v instanceof Number) {
        b.append(v);
      } else {
        quote(b, v.toString());
      }
    }
    return b.append('}').toString();
  }

  /** Appends s as a JSON string (RFC 8259 escapes; other characters as they are). */
  static void quote(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"':
          b.append("\\\"");
          break;
        case '\\':
          b.append("\\\\");
          break;
        case '\n':
          b.append("\\n");
          break;
        case '\r':
          b.append("\\r");
          break;
        case '\t':
          b.append("\\t");
          break;
        default:
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
      }
    }
    b.append('"');
  }

  /** Command-line arguments. */
  static final class Args extends PeerMain.CommonArgs {
    static final String USAGE =
        "usage: JoinPeer --users DIR --domains DIR [--dns-records DIR] --state-dir DIR"
            + " [--parallelism N]\n"
            + "                [--sink blackhole|collect] [--out FILE] [--conf KEY=VALUE]...\n"
            + "  --users, --domains  directories of debezium-json files (schemas off), one per"
            + " source partition\n"
            + "  --dns-records       the three-table chain (users ⋈ domains ⋈ dns_records) instead\n"
            + "  --state-dir         RocksDB's local directory (state on disk)\n"
            + "  --parallelism       default: the number of cores\n"
            + "  --sink              blackhole (timing, default) or collect (final join to --out)\n"
            + "  --conf              any Flink option, e.g. table.exec.mini-batch.enabled=true";

    Path users, domains, records;

    static Args parse(String[] args) {
      Args a = new Args();
      a.parse(
          args,
          (flag, v) -> {
            switch (flag) {
              case "--users" -> a.users = Path.of(v);
              case "--domains" -> a.domains = Path.of(v);
              case "--dns-records" -> a.records = Path.of(v);
              default -> throw new IllegalArgumentException("unknown flag " + flag);
            }
          });
      List<String> errs = new ArrayList<>();
      if (a.users == null || a.domains == null || a.stateDir == null) {
        errs.add("--users, --domains and --state-dir are required");
      }
      a.check(errs);
      if (a.parallelism < 1) {
        errs.add("--parallelism must be >= 1");
      }
      fail(errs);
      return a;
    }
  }
}
