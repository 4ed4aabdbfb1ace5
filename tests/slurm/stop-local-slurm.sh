#!/usr/bin/env bash
# Stops the cluster started by start-local-slurm.sh DIR (its slurmctld and slurmd).
set -uo pipefail
dir=$(realpath -m "$1")
for pid in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    [ -s "$pid" ] && kill "$(cat "$pid")" 2>/dev/null
done
for _ in $(seq 50); do
    alive=0
    for pid in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
        [ -s "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null && alive=1
    done
    [ "$alive" = 0 ] && exit 0
    sleep 0.1
done
for pid in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    [ -s "$pid" ] && kill -9 "$(cat "$pid")" 2>/dev/null
done
exit 0
