#!/bin/sh
# The same program as marked.c in POSIX shell, for images without a compiler
# (examples/container): busy work for about SECONDS seconds, its window and its
# counts marked on GC-Bench's control channel ($GCBENCH_CONTROL). Without GC-Bench
# (the variable unset) the lines go nowhere and the script runs the same.
# Usage: marked.sh SECONDS
set -eu
seconds=${1:-1.5}
send() { [ -n "${GCBENCH_CONTROL:-}" ] && printf '%s\n' "$*" > "$GCBENCH_CONTROL" || true; }
# the shell has no CLOCK_MONOTONIC: the events are timed when they arrive
send "window begin main"
start=$(date +%s%N)
limit=$(awk "BEGIN { printf \"%d\", $seconds * 1000000000 }")
items=0
while [ $(( $(date +%s%N) - start )) -lt "$limit" ]; do
    i=0
    while [ $i -lt 200 ]; do i=$((i + 1)); done
    items=$((items + 200))
    send "count items 200"
    send "step"
done
send "window end main"
echo "$items items"
