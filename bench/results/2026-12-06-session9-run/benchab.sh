#!/bin/bash
# benchab.sh BENCH N binA binB: N interleaved pairs, ns/op and CPU-s (user+sys) per run
b=$1; n=$2; A=$3; B=$4; shift 4
for i in $(seq $n); do for bin in $A $B; do
  s=$( { /usr/bin/time -f "%U %S" nice $bin -test.run XXX -test.bench "$b" -test.benchtime 300000x -test.count 1 "$@" 2>&1 >/tmp/runcommit/bo.txt; } 2>&1 | tail -1)
  ns=$(grep ns/op /tmp/runcommit/bo.txt | awk '{print $3}')
  echo "$(basename $bin) ns_op=$ns cpu_s=$(echo $s | awk '{print $1+$2}') load=$(cut -d' ' -f1 /proc/loadavg)"
done; done
