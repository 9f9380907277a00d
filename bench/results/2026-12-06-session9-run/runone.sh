#!/bin/bash
# runone.sh TAG BIN [extra brokercost run flags]: one measured cdcjoin run on a fresh group and state
set -e
tag=$1; bin=$2; shift 2
g=w1m-$tag-$(date +%s%N | cut -c1-13)
d=/tmp/runcommit/run/$g
mkdir -p $d
sed -e "s#group: w1m-run#group: $g#" -e "s#/tmp/runcommit/run/state#$d/state#" /tmp/runcommit/job.yaml > $d/job.yaml
echo "tag=$tag group=$g load_before=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
nice /work/wt/runcommit/bin/brokercost run --brokers 127.0.0.1:34092 --cdcjoin $bin --config $d/job.yaml --output $d/out.jsonl \
  --broker-pid $(cat /tmp/runcommit-kafka/kafka.pid) --log-dir /tmp/runcommit-kafka/data --expect /tmp/runspeed/w1m/final.jsonl "$@"
echo "load_after=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
rm -rf $d/state $d/out.jsonl
