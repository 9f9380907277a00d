package io.github.cdcjoin.peers.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;

/**
 * Serdes for Debezium's JSON records (Kafka Connect JsonConverter, schemas on or off), as a
 * Kafka Streams application reads them.
 *
 * <p>Keys: the record key {@code {"id":N}} (or its schema-wrapped form) as a Long, written back
 * as {@code {"id":N}}. Rows: the envelope's {@code after} image projected to a few columns, as
 * a JSON object; a delete (op d), a tombstone and a missing after image are null, which a KTable
 * reads as a delete. What the serializer writes ({@code {"after":{…}}}) the deserializer reads
 * again, so a store's changelog restores.
 */
final class Debezium {
  static final ObjectMapper JSON = new ObjectMapper();

  private Debezium() {}

  static JsonNode parse(byte[] b) {
    try {
      JsonNode n = JSON.readTree(b);
      if (n != null && n.has("payload") && n.has("schema")) {
        n = n.get("payload");
      }
      return n;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The {"id":N} record key as a Long. */
  static Serde<Long> idKey() {
    Serializer<Long> ser =
        (topic, id) -> id == null ? null : ("{\"id\":" + id + "}").getBytes(StandardCharsets.UTF_8);
    Deserializer<Long> de =
        (topic, b) -> {
          if (b == null) {
            return null;
          }
          JsonNode n = parse(b);
          return n == null || n.get("id") == null || n.get("id").isNull() ? null : n.get("id").asLong();
        };
    return Serdes.serdeFrom(ser, de);
  }

  /** Rows projected to columns: the after image's columns, or null for a delete. */
  static Serde<ObjectNode> row(String... columns) {
    Serializer<ObjectNode> ser =
        (topic, row) -> {
          if (row == null) {
            return null;
          }
          ObjectNode env = JSON.createObjectNode();
          env.set("after", row);
          try {
            return JSON.writeValueAsBytes(env);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        };
    Deserializer<ObjectNode> de =
        (topic, b) -> {
          if (b == null || b.length == 0) {
            return null;
          }
          JsonNode env = parse(b);
          if (env == null || env.isNull() || "d".equals(env.path("op").asText())) {
            return null;
          }
          JsonNode after = env.get("after");
          if (after == null || after.isNull()) {
            return null;
          }
          ObjectNode out = JSON.createObjectNode();
          for (String c : columns) {
            out.set(c, after.get(c));
          }
          return out;
        };
    return Serdes.serdeFrom(ser, de);
  }

  /** A JSON object written and read as is (output rows). */
  static Serde<ObjectNode> json() {
    Serializer<ObjectNode> ser =
        (topic, row) -> {
          if (row == null) {
            return null;
          }
          try {
            return JSON.writeValueAsBytes(row);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        };
    Deserializer<ObjectNode> de = (topic, b) -> b == null ? null : (ObjectNode) parse(b);
    return Serdes.serdeFrom(ser, de);
  }
}
