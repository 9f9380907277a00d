#!/bin/bash
# usage: run.sh TAG BIN ROWS [extra args...]; env passes through
tag=$1 bin=$2 rows=$3; shift 3
echo "$tag start $(date -u +%T) $(uptime | sed 's/.*load/load/')" >> /tmp/depth/r/runs.log
nice -n 10 $bin bench --rows $rows --no-rebuild --rate-duration 2s --storm-renames 2 --out /tmp/depth/r/$tag --cpuprofile /tmp/depth/r/$tag.prof --quiet "$@" > /tmp/depth/r/$tag.log 2>&1
echo "$tag end $(date -u +%T) $(uptime | sed 's/.*load/load/') $(grep '| cdc |' /tmp/depth/r/$tag/REPORT.md | head -1)" >> /tmp/depth/r/runs.log
