#!/usr/bin/env bash
# bench/run.sh [--quick] - issue 5's benchmarks, side by side in one run
# (`make bench` runs the full mode; never part of `make test`).
#
# Builds the core (make mongostore/core.so) and bench/raw_limit.c, starts one
# test server (tools/test-server: mongo-java-server 1.47.0, in-memory) unless
# MONGOSTORE_URI names a server to use, warms it with a throwaway round of
# every benchmark, then measures:
#   bench/raw_limit        the raw load + CAS loop: the two-round-trip limit
#                          on one document, and the events benchmark's own
#                          workload done by libmongoc alone
#   bench/events.lua       mongostore events/s, 1 and 4 worker processes
#   bench/harel_events.py  the same workload on harel 0.9.0, 1 and 4 processes
#   bench/latency.lua      commit latency at an execution's n-th event (with
#                          the default dedupe window, and with a window of 10
#                          up to the 10,000th event); sweep, relay and listing
#                          calls at 10k/100k/1M executions
# prints the summary with its ratios and writes bench/RESULTS.md.
#
# --quick: fewer executions and iterations, commit latency up to the 10,000th
# event, 10k and 100k executions; about 3 minutes. The full mode goes to the
# 100,000th event and 1M executions and takes far longer (20-40 minutes on a
# small machine, more when the store is slow).
#
# Environment: MONGOSTORE_URI (use that server; its databases named
# msbench_<pid>_* are dropped at the end), LUA (default lua5.4),
# BENCH_RESULTS (default bench/RESULTS.md).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mode=full
for a in "$@"; do
    case $a in
        --quick) mode=quick ;;
        -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument '$a' (use --quick or nothing)" >&2; exit 2 ;;
    esac
done
command="bench/run.sh${*:+ $*}"
lua=${LUA:-lua5.4}
out=$here/out
md=${BENCH_RESULTS:-$here/RESULTS.md}
mkdir -p "$out"
results=$out/results-$mode.txt
log=$out/run-$mode.log
: >"$results"
: >"$log"
started=$SECONDS

note() { echo "bench: $*" | tee -a "$log" >&2; }

if [[ $mode == quick ]]; then
    raw_iters=3000 raw_warm=1000
    n_events=1000
    points=1,1000,10000 commit_budget=30
    short_window=10 short_points=1,1000,10000 short_budget=30
    scales=10000,100000 reps=3 op_budget=8 skip=60
else
    raw_iters=20000 raw_warm=3000
    n_events=5000
    points=1,1000,10000,100000 commit_budget=900
    short_window=10 short_points=1,1000,10000 short_budget=60
    scales=10000,100000,1000000 reps=5 op_budget=30 skip=300
fi

# ---- build
note "building the core and raw_limit"
make -C "$root" --no-print-directory mongostore/core.so >>"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; echo "run.sh: make mongostore/core.so failed" >&2; exit 1; }
# shellcheck disable=SC2046
cc -O2 -o "$out/raw_limit" "$here/raw_limit.c" $(pkg-config --cflags --libs libmongoc-1.0) >>"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; echo "run.sh: could not build bench/raw_limit.c" >&2; exit 1; }
py=$("$root/tools/pyenv")
export PYTHONDONTWRITEBYTECODE=1   # no __pycache__ in bench/

# ---- server
prefix="msbench_$$_"
server_dir=""
cleanup() {
    if [[ -n ${uri:-} ]]; then
        "$py" - "$uri" "$prefix" >/dev/null 2>&1 <<'EOF' || true
import sys, pymongo
c = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=3000)
for name in c.list_database_names():
    if name.startswith(sys.argv[2]):
        c.drop_database(name)
EOF
    fi
    if [[ -n $server_dir ]]; then
        "$root/tools/test-server" stop "$server_dir" >/dev/null 2>&1 || true
        rm -rf "$server_dir"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ -n ${MONGOSTORE_URI:-} ]]; then
    uri=$MONGOSTORE_URI
    version=$("$py" -c 'import sys, pymongo; print(pymongo.MongoClient(sys.argv[1]).admin.command("buildInfo").get("version", "?"))' "$uri" 2>/dev/null || echo "?")
    server="the server at MONGOSTORE_URI (reports version $version)"
    note "using MONGOSTORE_URI"
else
    server_dir=$(mktemp -d "$out/server.XXXXXX")
    uri=$("$root/tools/test-server" start "$server_dir")
    server="mongo-java-server 1.47.0, in-memory backend (tools/test-server, one JVM for the whole run)"
    note "test server at $uri (pid $(cat "$server_dir/server.pid"))"
fi

# run <label> <command...>: stderr to the console and the log, RESULT lines
# to $results. A step that fails is noted (the report lists it) and the run
# goes on with the others.
failures=0
run() {
    local label=$1
    shift
    note "$label"
    if ! "$@" >>"$results" 2> >(tee -a "$log" >&2); then
        failures=$((failures + 1))
        note "FAILED: $label (see $log)"
        echo "RESULT meta.failed.$failures $label" >>"$results"
    fi
}
# warm <command...>: the same, results thrown away.
warm() {
    "$@" >/dev/null 2>>"$log"
}

# ---- warm-up: every benchmark once, small, results thrown away (a cold JVM
# runs 2-4x slower)
note "warming the server (throwaway round)"
warm "$out/raw_limit" "$uri" 3000 1000 "${prefix}warm_raw" 500
warm "$lua" "$here/events.lua" "$uri" --n 500 --workers 1 --db "${prefix}warm_ms1"
warm "$lua" "$here/events.lua" "$uri" --n 500 --workers 4 --db "${prefix}warm_ms4"
warm "$py" "$here/harel_events.py" "$uri" --n 200 --workers 1 --db "${prefix}warm_h1"
warm "$py" "$here/harel_events.py" "$uri" --n 200 --workers 4 --db "${prefix}warm_h4"
warm "$lua" "$here/latency.lua" "$uri" --part commit --points 1,1000 --budget 20 --db "${prefix}warm_lat"
warm "$lua" "$here/latency.lua" "$uri" --part scale --scales 2000 --reps 2 --python "$py" --db "${prefix}warm_lat"
"$py" - "$uri" "${prefix}warm" >/dev/null 2>&1 <<'EOF' || true
import sys, pymongo
c = pymongo.MongoClient(sys.argv[1])
for name in c.list_database_names():
    if name.startswith(sys.argv[2]):
        c.drop_database(name)
EOF

# ---- the measured round
{
    echo "RESULT meta.loadavg_start $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "RESULT meta.reps $reps"
    echo "RESULT meta.commit_budget_s $commit_budget"
    echo "RESULT meta.op_budget_s $op_budget"
    echo "RESULT meta.skip_s $skip"
} >>"$results"
run "raw load + CAS limit ($raw_iters iterations) and the events workload in raw libmongoc ($n_events executions)" \
    "$out/raw_limit" "$uri" "$raw_iters" "$raw_warm" "${prefix}raw" "$n_events"
run "mongostore events/s, 1 worker ($n_events executions)" \
    "$lua" "$here/events.lua" "$uri" --n "$n_events" --workers 1 --db "${prefix}ms1" --label ms1
# the raw workload again right after, so the limit brackets mongostore's run
# in time (its keys renamed raw.after.flow.*; the one-document loops dropped)
run "the events workload in raw libmongoc again, right after mongostore's 1-worker run" \
    bash -c 'set -o pipefail; "$@" | sed -n "s/^RESULT raw\.flow\./RESULT raw.after.flow./p"' _ \
    "$out/raw_limit" "$uri" 1000 100 "${prefix}raw2" "$n_events"
run "harel events/s, 1 worker ($n_events executions)" \
    "$py" "$here/harel_events.py" "$uri" --n "$n_events" --workers 1 --db "${prefix}h1" --label h1
run "mongostore events/s, 4 workers ($n_events executions)" \
    "$lua" "$here/events.lua" "$uri" --n "$n_events" --workers 4 --db "${prefix}ms4" --label ms4
run "harel events/s, 4 workers ($n_events executions)" \
    "$py" "$here/harel_events.py" "$uri" --n "$n_events" --workers 4 --db "${prefix}h4" --label h4
run "commit latency at events $points (budget ${commit_budget}s)" \
    "$lua" "$here/latency.lua" "$uri" --part commit --points "$points" --budget "$commit_budget" --db "${prefix}lat"
run "commit latency with dedupe_window $short_window at events $short_points (budget ${short_budget}s)" \
    "$lua" "$here/latency.lua" "$uri" --part commit --points "$short_points" --budget "$short_budget" \
    --dedupe-window "$short_window" --db "${prefix}lat"
run "sweeps, relays and listing at $scales executions" \
    "$lua" "$here/latency.lua" "$uri" --part scale --scales "$scales" --reps "$reps" --op-budget "$op_budget" \
    --skip "$skip" --python "$py" --db "${prefix}lat"

echo "RESULT meta.loadavg_end $(cut -d' ' -f1-3 /proc/loadavg)" >>"$results"
echo "RESULT meta.elapsed_s $((SECONDS - started))" >>"$results"
note "done in $((SECONDS - started)) s (build, warm-up and measured round); writing $md"
echo >&2
"$lua" "$here/report.lua" "$results" "$md" "$mode" "$command" "$server" "$(date -u '+%Y-%m-%d %H:%M UTC')"
((failures == 0)) || { echo "run.sh: $failures benchmark step(s) failed (see $log)" >&2; exit 1; }
