#!/bin/bash
# ab2.sh OUT N binA binB: waits for running runone.sh, then N interleaved pairs
out=$1; n=$2; A=$3; B=$4
while pgrep -f "runcommit/runone.sh" >/dev/null; do sleep 2; done
for i in $(seq $n); do for bin in $A $B; do
  /tmp/runcommit/runone.sh $(basename $bin)-p$i $bin >> $out 2>&1
done; done
echo done >> $out
