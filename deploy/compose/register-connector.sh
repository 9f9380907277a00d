#!/bin/sh
# register-connector.sh URL FILE: PUT FILE's "config" as connector FILE's
# "name" on the Kafka Connect REST API at URL (create or update), then wait
# until the connector's task is RUNNING. Used by docker-compose.yml's
# one-shot register-connector service (curl image: sh + curl, no jq).
set -eu
url="$1"
file="$2"
name="$(sed -n 's/^ *"name": *"\([^"]*\)".*/\1/p' "$file" | head -n 1)"
# The "config" object: everything between its braces (the file's layout is
# one key per line, as in deploy/compose/debezium-postgres.json).
config="$(sed -n '/"config": *{/,/^  }/p' "$file" | sed '1s/.*"config": *//')"
i=0
until curl -sf -o /dev/null -X PUT -H 'Content-Type: application/json' --data "$config" "$url/connectors/$name/config"; do
	i=$((i + 1))
	[ "$i" -lt 60 ] || { echo "register-connector: PUT $url/connectors/$name/config failed" >&2; exit 1; }
	sleep 2
done
i=0
until curl -sf "$url/connectors/$name/status" | grep -q '"tasks":\[{[^]]*"state":"RUNNING"'; do
	i=$((i + 1))
	[ "$i" -lt 90 ] || { echo "register-connector: $name not RUNNING:" >&2; curl -s "$url/connectors/$name/status" >&2; exit 1; }
	sleep 2
done
echo "register-connector: $name RUNNING"
