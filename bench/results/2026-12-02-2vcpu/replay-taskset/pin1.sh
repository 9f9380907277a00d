#!/bin/sh
rm -rf /tmp/speed/m/st1 && exec taskset -c 0 /tmp/speed-cdcjoin replay --config /tmp/speed/m/job1.yaml --input /tmp/speed/hp/history.jsonl --quiet
