package io.github.cdcjoin.peers.flink;

import java.io.PrintStream;
import java.util.function.Function;

/**
 * The peers' command-line entry: parse the arguments (exit 2 with the usage on a bad one), run
 * the job (exit 1 on a failure), exit 0 — MiniCluster threads must not keep the JVM alive.
 */
final class PeerMain {

  /** A peer's job: its parsed arguments, stdout for its one JSON object. */
  interface Job<A> {
    void run(A args, PrintStream out) throws Exception;
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
}
