#!/bin/bash
# runone.sh TAG BIN: one measured cdcjoin run (brokercost run) on a fresh group and state, private broker 34092
set -e
tag=$1; bin=$2; shift 2
g=w1m-$tag-$(date +%s%N | cut -c1-13)
d=/tmp/s10bench/run/$g
mkdir -p $d
cat > $d/job.yaml <<Y
name: bench
parent: {topic: w1m.users, key: id}
child:  {topic: w1m.domains, key: id, parent_key: user_id}
join: inner
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: $d/state}
kafka:
  brokers: [127.0.0.1:34092]
  group: $g
  metrics_addr: 127.0.0.1:34068
Y
echo "tag=$tag group=$g load_before=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
nice /tmp/s10bench/brokercost run --brokers 127.0.0.1:34092 --cdcjoin $bin --config $d/job.yaml --output $d/out.jsonl \
  --broker-pid $(cat /tmp/runcommit-kafka/kafka.pid) --log-dir /tmp/runcommit-kafka/data --expect /tmp/runspeed/w1m/final.jsonl "$@"
echo "load_after=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
rm -rf $d/state $d/out.jsonl
