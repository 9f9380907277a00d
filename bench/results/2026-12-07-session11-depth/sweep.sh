#!/bin/bash
tag=$1 bin=$2
echo "$tag start $(date -u +%T) $(uptime | sed 's/.*load/load/')" >> /tmp/depth/sw/sweeps.log
nice -n 10 $bin bench --sweep 1e6,1e7 --out /tmp/depth/sw/$tag --quiet > /tmp/depth/sw/$tag.log 2>&1
echo "$tag end $(date -u +%T) $(uptime | sed 's/.*load/load/')" >> /tmp/depth/sw/sweeps.log
