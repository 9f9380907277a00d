#!/bin/sh
rm -rf /tmp/speed/m/st2 && exec taskset -c 0,1 /tmp/speed-cdcjoin replay --config /tmp/speed/m/job2.yaml --input /tmp/speed/hp/history.jsonl --quiet
