#!/usr/bin/env bash
# bench/run.sh [--quick] [--documents] [--models] [--records] [--batching] -
# issue 5's, 11's, 12's, 13's and 14's benchmarks, side by side in one run
# (`make bench` runs the full mode; never part of `make test`).
#
# Builds the core (make mongostore/core.so), bench/raw_limit.c,
# bench/documents_limit.c and bench/batch_limit.c, starts one
# test server (tools/test-server: mongo-java-server 1.47.0, in-memory) unless
# MONGOSTORE_URI names a server to use, warms it with a throwaway round of
# every benchmark, then measures:
#   bench/raw_limit        the raw load + CAS loop: the two-round-trip limit
#                          on one document, and the events benchmark's own
#                          workload done by libmongoc alone
#   bench/events.lua       mongostore events/s, 1, 4 and 16 worker processes
#   bench/harel_events.py  the same workload on harel 0.9.0, 1, 4 and 16 processes
#   bench/latency.lua      commit latency at an execution's n-th event (with
#                          the default dedupe window, and with a window of 10
#                          up to the 10,000th event); sweep, relay and listing
#                          calls at 10k/100k/1M executions
#   the document rows      insert_many of 10,000 documents, find and decode of
#                          10,000, 1,000 single update_one, one bulk_write of
#                          1,000 update_one, by mongostore's document API
#                          (bench/documents.lua), libmongoc alone
#                          (bench/documents_limit.c), pymongo 4.10.1
#                          (bench/documents_pymongo.py) and the Node.js
#                          mongodb driver (bench/documents_node.js, the
#                          version bench/package-lock.json pins, installed
#                          with npm ci under bench/out/node); one process per
#                          contender and round, the contenders' order turning
#                          each round, the median of the rounds counts
#   the model rows         insert 10,000 documents, load 10,000, 1,000
#                          change-tracked saves of one field, one bulk save of
#                          1,000 deltas, 1,000 atomic updates, by mongostore
#                          models and by the bare document API doing the same
#                          writes (bench/models.lua) and by Mongoose
#                          (bench/models_mongoose.js, the version
#                          bench/package-lock.json pins); rounds as the
#                          document rows'
#   the record rows        save and fetch of 10,000 record graphs (a book,
#                          3 embedded chapters, an author record shared by
#                          10 books) by mongostore.records, a walk over all
#                          of them by keyset pages, a page at the first and
#                          at the last position, a report-only fsck
#                          (bench/records.lua, one process)
#   the batching rows      issue 14's: on loopback and through tools/delay-proxy
#                          (BENCH_DELAY_MS each way, default 0.5; its own cost
#                          measured with delay 0 by interleaved pings), one
#                          worker at K = 1, 10, 100, 1,000 executions: batched
#                          delivery against one event at a time, for
#                          producers (send_many / send) and for the relay
#                          (batch_delivery on / off), events/s, round trips
#                          and client CPU per event (bench/batch.lua); the
#                          same batched round trips by libmongoc alone (one
#                          find $in, one unordered bulk of K CAS updates:
#                          bench/batch_limit.c); mongostore against harel at
#                          1, 4 and 16 worker processes; commits/s with emits
#                          from 16 worker processes with seq_block = 1 (a
#                          counter round trip per emitting commit) and 1000
#                          (bench/events.lua --emit 1 --seq-block B, two
#                          rounds each, taking turns); then one short pass of
#                          the same rows on SecantusDB (tools/secantus-server,
#                          loopback only; BENCH_SECANTUS=0 skips it)
# prints the summary with its ratios and writes bench/RESULTS.md.
#
# --quick: fewer executions and iterations, commit latency up to the 10,000th
# event, 10k and 100k executions; about 3 minutes. The full mode goes to the
# 100,000th event and 1M executions and takes far longer (20-40 minutes on a
# small machine, more when the store is slow). The document rows: 5 rounds in
# quick mode, 9 in full mode (about 10 s a round); the model rows: 3 rounds in
# quick mode, 7 in full mode (about 15 s a round).
#
# --documents: the document rows only (warm-up included), reported to
# bench/out/documents-<mode>.md unless BENCH_RESULTS is set. --models: the
# model rows only, reported to bench/out/models-<mode>.md; both flags: both
# sets of rows, to bench/out/documents-models-<mode>.md. --records: the
# record rows (alone or with the others, bench/out/<sets>-<mode>.md).
# --batching: issue 14's batching rows (alone or with the others; about 6
# minutes in quick mode, SecantusDB pass included; the quick pass on
# SecantusDB measures K = 10 and 100 only).
# --openresty: the OpenResty load rows (bench/openresty.lua: the example
# server in real nginx, driven by wrk; creates/s, events/s, one hot
# execution through send and through the inbox, timer lag after a burst,
# each checked against the database; the inbox row again on a second nginx
# with inbox_group = 1, side by side; about 5 minutes).
#
# Environment: MONGOSTORE_URI (use that server; its databases named
# msbench_<pid>_* are dropped at the end), LUA (default lua5.4),
# BENCH_RESULTS (default bench/RESULTS.md), NODE (default node; without node
# and npm the Node row reads "not measured"), BENCH_DELAY_MS (the proxy's
# delay each way, 0.5), BENCH_SECANTUS (0: no SecantusDB pass).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mode=full
want_docs="" want_models=""
for a in "$@"; do
    case $a in
        --quick) mode=quick ;;
        --documents) want_docs=yes ;;
        --models) want_models=yes ;;
        --records) want_records=yes ;;
        --batching) want_batching=yes ;;
        --openresty) want_openresty=yes ;;
        -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument '$a' (use --quick, --documents, --models, --records, --batching, --openresty or nothing)" >&2; exit 2 ;;
    esac
done
# parts: all (every benchmark), or the row sets asked for
if [[ -n $want_docs && -n $want_models ]]; then parts=documents,models
elif [[ -n $want_docs ]]; then parts=documents
elif [[ -n $want_models ]]; then parts=models
else parts=all
fi
want_records=${want_records:-}
if [[ -n $want_records ]]; then
    if [[ $parts == all ]]; then parts=records; else parts=$parts,records; fi
fi
want_batching=${want_batching:-}
if [[ -n $want_batching ]]; then
    if [[ $parts == all ]]; then parts=batching; else parts=$parts,batching; fi
fi
want_openresty=${want_openresty:-}
if [[ -n $want_openresty ]]; then
    if [[ $parts == all ]]; then parts=openresty; else parts=$parts,openresty; fi
fi
do_records=""
[[ $parts == all || -n $want_records ]] && do_records=yes
do_batching=""
[[ $parts == all || -n $want_batching ]] && do_batching=yes
do_openresty=""
[[ $parts == all || -n $want_openresty ]] && do_openresty=yes
do_docs="" do_models=""
[[ $parts == all || -n $want_docs ]] && do_docs=yes
[[ $parts == all || -n $want_models ]] && do_models=yes
command="bench/run.sh${*:+ $*}"
lua=${LUA:-lua5.4}
out=$here/out
mkdir -p "$out"
if [[ $parts != all ]]; then
    tag=${parts//,/-}
    md=${BENCH_RESULTS:-$out/$tag-$mode.md}
    results=$out/results-$tag-$mode.txt
    log=$out/run-$tag-$mode.log
else
    md=${BENCH_RESULTS:-$here/RESULTS.md}
    results=$out/results-$mode.txt
    log=$out/run-$mode.log
fi
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
    doc_rounds=5
    model_rounds=3
    records_reps=5
    batch_events=1000 batch_workers_n=1000 counter_n=2000
    sec_ks=10,100 sec_events=200 sec_workers_n=80
else
    raw_iters=20000 raw_warm=3000
    n_events=5000
    points=1,1000,10000,100000 commit_budget=900
    short_window=10 short_points=1,1000,10000 short_budget=60
    scales=10000,100000,1000000 reps=5 op_budget=30 skip=300
    doc_rounds=9
    model_rounds=7
    records_reps=9
    batch_events=10000 batch_workers_n=2000 counter_n=5000
    sec_ks=1,10,100,1000 sec_events=1000 sec_workers_n=500
fi
# issue 14's: the executions of the batching rows, the proxy's delay each way
batch_ks=1,10,100,1000
delay_ms=${BENCH_DELAY_MS:-0.5}
# with the other execution rows, the workers rows share their executions
[[ $parts == all ]] && batch_workers_n=$n_events
# the issue's sizes, in both modes: documents, single updates, bulk updates
doc_n=10000 doc_updates=1000 doc_bulk=1000
# issue 12's: documents inserted and loaded, tracked saves, bulk-saved deltas, atomic updates
model_n=10000 model_saves=1000 model_bulk=1000 model_updates=1000
# issue 13's: book graphs saved, fetched and walked; the walk's page size
records_n=10000 records_page=100

# ---- build
note "building the core and raw_limit"
make -C "$root" --no-print-directory mongostore/core.so >>"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; echo "run.sh: make mongostore/core.so failed" >&2; exit 1; }
# shellcheck disable=SC2046
cc -O2 -o "$out/raw_limit" "$here/raw_limit.c" $(pkg-config --cflags --libs libmongoc-1.0) >>"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; echo "run.sh: could not build bench/raw_limit.c" >&2; exit 1; }
# shellcheck disable=SC2046
cc -O2 -o "$out/documents_limit" "$here/documents_limit.c" $(pkg-config --cflags --libs libmongoc-1.0) >>"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; echo "run.sh: could not build bench/documents_limit.c" >&2; exit 1; }
# shellcheck disable=SC2046
cc -O2 -Wall -Wextra -Werror -o "$out/batch_limit" "$here/batch_limit.c" $(pkg-config --cflags --libs libmongoc-1.0) \
    >>"$log" 2>&1 || { tail -n 30 "$log" >&2; echo "run.sh: could not build bench/batch_limit.c" >&2; exit 1; }
# tools/pyenv's venv pins pymongo 4.10.1 (tools/requirements-test.txt), the
# pymongo contender of the document rows.
py=$("$root/tools/pyenv")
export PYTHONDONTWRITEBYTECODE=1   # no __pycache__ in bench/

# The Node.js driver, exactly as bench/package-lock.json pins it, installed
# once per lockfile under bench/out/node (npm ci: the lockfile or nothing).
node=${NODE:-node}
node_dir=$out/node
node_ok=""
if [[ -z $do_docs && -z $do_models ]]; then
    : # no row of this run needs the Node.js driver or Mongoose
elif command -v "$node" >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    want=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
    if [[ -f $node_dir/.stamp && $(cat "$node_dir/.stamp") == "$want" && -d $node_dir/node_modules/mongodb &&
        -d $node_dir/node_modules/mongoose ]]; then
        node_ok=yes
    else
        note "installing the Node.js mongodb driver and Mongoose (npm ci under bench/out/node)"
        rm -rf "$node_dir"
        mkdir -p "$node_dir"
        cp "$here/package.json" "$here/package-lock.json" "$node_dir/"
        if (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) >>"$log" 2>&1; then
            echo "$want" >"$node_dir/.stamp"
            node_ok=yes
        else
            tail -n 20 "$log" >&2
            note "npm ci failed: the Node and Mongoose rows read not measured"
        fi
    fi
else
    note "no $node or npm on PATH: the Node and Mongoose rows read not measured"
fi

# ---- server
prefix="msbench_$$_"
server_dir=""
proxy_pids=()
sec_dir=""
cleanup() {
    local p
    for p in "${proxy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [[ -n $sec_dir ]]; then
        "$root/tools/secantus-server" stop "$sec_dir" >/dev/null 2>&1 || true
        rm -rf "$sec_dir"
    fi
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

# doc_contender <label> <round> <n> <updates> <bulk> <db>: one round of the
# document rows by one contender (lua: mongostore, c: libmongoc alone, py:
# pymongo, node: the Node.js driver).
doc_contender() {
    local label=$1 round=$2 n=$3 updates=$4 bulk=$5 db=$6
    case $label in
        lua) "$lua" "$here/documents.lua" "$uri" "$db" lua "$round" "$n" "$updates" "$bulk" ;;
        c) "$out/documents_limit" "$uri" "$db" c "$round" "$n" "$updates" "$bulk" ;;
        py) "$py" "$here/documents_pymongo.py" "$uri" "$db" py "$round" "$n" "$updates" "$bulk" ;;
        node) NODE_PATH=$node_dir/node_modules "$node" "$here/documents_node.js" "$uri" "$db" node "$round" "$n" \
            "$updates" "$bulk" ;;
    esac
}
doc_labels=(lua c py)
[[ -n $node_ok ]] && doc_labels+=(node)
declare -A doc_names=([lua]="mongostore" [c]="libmongoc alone" [py]="pymongo" [node]="Node.js mongodb")

# model_contender <label> <round> <n> <saves> <bulk> <updates> <db>: one round
# of the model rows (model: mongostore models, bare: the document API doing
# the same writes, mongoose: Mongoose).
model_contender() {
    local label=$1 round=$2 n=$3 saves=$4 bulk=$5 updates=$6 db=$7
    case $label in
        model | bare) "$lua" "$here/models.lua" "$uri" "$db" "$label" "$round" "$n" "$saves" "$bulk" "$updates" ;;
        mongoose) NODE_PATH=$node_dir/node_modules "$node" "$here/models_mongoose.js" "$uri" "$db" mongoose "$round" \
            "$n" "$saves" "$bulk" "$updates" ;;
    esac
}
model_labels=(model bare)
[[ -n $node_ok ]] && model_labels+=(mongoose)
declare -A model_names=([model]="mongostore models" [bare]="mongostore document API" [mongoose]="Mongoose")

# ---- warm-up: every benchmark once, small, results thrown away (a cold JVM
# runs 2-4x slower)
note "warming the server (throwaway round)"
if [[ $parts == all ]]; then
    warm "$out/raw_limit" "$uri" 3000 1000 "${prefix}warm_raw" 500
    warm "$lua" "$here/events.lua" "$uri" --n 500 --workers 1 --db "${prefix}warm_ms1"
    warm "$lua" "$here/events.lua" "$uri" --n 500 --workers 4 --db "${prefix}warm_ms4"
    warm "$py" "$here/harel_events.py" "$uri" --n 200 --workers 1 --db "${prefix}warm_h1"
    warm "$py" "$here/harel_events.py" "$uri" --n 200 --workers 4 --db "${prefix}warm_h4"
    warm "$lua" "$here/latency.lua" "$uri" --part commit --points 1,1000 --budget 20 --db "${prefix}warm_lat"
    warm "$lua" "$here/latency.lua" "$uri" --part scale --scales 2000 --reps 2 --python "$py" --db "${prefix}warm_lat"
fi
# the document and model rows' warm-up; a contender that cannot run fails
# again, and is reported, in the measured round
if [[ -n $do_docs ]]; then
    for label in "${doc_labels[@]}"; do
        warm doc_contender "$label" 0 1000 100 100 "${prefix}warm_docs_$label" || true
    done
fi
if [[ -n $do_models ]]; then
    for label in "${model_labels[@]}"; do
        warm model_contender "$label" 0 1000 100 100 100 "${prefix}warm_models_$label" || true
    done
fi
if [[ -n $do_batching ]]; then
    warm "$lua" "$here/batch.lua" "$uri" --ks 10,100 --events 200 --db "${prefix}warm_batch"
    warm "$out/batch_limit" "$uri" "${prefix}warm_bl" warm 10,100 200
    if [[ $parts != all ]]; then
        warm "$lua" "$here/events.lua" "$uri" --n 300 --workers 4 --db "${prefix}warm_ms4"
        warm "$py" "$here/harel_events.py" "$uri" --n 100 --workers 1 --db "${prefix}warm_h1"
    fi
fi
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
# The document rows: every contender once per round, in an order that turns
# each round, so the machine's drift falls on all of them alike; first, while
# the server holds nothing but what they write.
if [[ -n $do_docs ]]; then
    echo "RESULT meta.doc_rounds $doc_rounds" >>"$results"
    echo "RESULT meta.doc_sizes $doc_n $doc_updates $doc_bulk" >>"$results"
    echo "RESULT meta.doc_contenders ${doc_labels[*]}" >>"$results"
    for ((r = 1; r <= doc_rounds; r++)); do
        k=${#doc_labels[@]}
        for ((j = 0; j < k; j++)); do
            label=${doc_labels[$(((j + r - 1) % k))]}
            run "documents round $r/$doc_rounds: ${doc_names[$label]}" \
                doc_contender "$label" "$r" "$doc_n" "$doc_updates" "$doc_bulk" "${prefix}docs_$label"
        done
    done
fi
# The model rows, the same way.
if [[ -n $do_models ]]; then
    echo "RESULT meta.model_rounds $model_rounds" >>"$results"
    echo "RESULT meta.model_sizes $model_n $model_saves $model_bulk $model_updates" >>"$results"
    echo "RESULT meta.model_contenders ${model_labels[*]}" >>"$results"
    for ((r = 1; r <= model_rounds; r++)); do
        k=${#model_labels[@]}
        for ((j = 0; j < k; j++)); do
            label=${model_labels[$(((j + r - 1) % k))]}
            run "models round $r/$model_rounds: ${model_names[$label]}" \
                model_contender "$label" "$r" "$model_n" "$model_saves" "$model_bulk" "$model_updates" \
                "${prefix}models_$label"
        done
    done
fi
# The record rows: one process (it warms itself up on a store of its own prefix).
if [[ -n $do_records ]]; then
    echo "RESULT meta.records_sizes $records_n $records_page $records_reps" >>"$results"
    run "records: save, fetch and keyset walk of $records_n book graphs" \
        "$lua" "$here/records.lua" "$uri" "${prefix}records" "$records_n" "$records_page" "$records_reps"
fi

if [[ $parts == all ]]; then
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
    run "mongostore events/s, 16 workers ($n_events executions)" \
        "$lua" "$here/events.lua" "$uri" --n "$n_events" --workers 16 --db "${prefix}ms16" --label ms16
    run "harel events/s, 16 workers ($n_events executions)" \
        "$py" "$here/harel_events.py" "$uri" --n "$n_events" --workers 16 --db "${prefix}h16" --label h16
fi

# ---- issue 14's batching rows
# start_proxy <delay ms> <uri>: a tools/delay-proxy in front of the server of
# <uri> (one host, as the bench servers are); prints the URI through it.
start_proxy() {
    local delay=$1 u=$2 hostport pfile pid port i
    hostport=${u#mongodb://}
    hostport=${hostport#*@}
    hostport=${hostport%%[/?]*}
    pfile=$(mktemp "$out/proxy.XXXXXX")
    "$root/tools/delay-proxy" --to "$hostport" --delay-ms "$delay" >"$pfile" 2>>"$log" &
    pid=$!
    proxy_pids+=("$pid")
    for ((i = 0; i < 300; i++)); do
        port=$(head -n 1 "$pfile")
        [[ -n $port ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    rm -f "$pfile"
    [[ -n $port ]] || { echo "run.sh: tools/delay-proxy did not start" >&2; return 1; }
    echo "${u/$hostport/127.0.0.1:$port}"
}
# workers_rows <tag> <uri> <n>: mongostore and harel at 1, 4 and 16 worker
# processes on <n> executions; <tag> ("" or "sec.") prefixes the keys
# (<tag>ms<W>.*, <tag>h<W>.*).
workers_rows() {
    local tag=$1 u=$2 n=$3 w dbt=${1//./_}
    for w in 1 4 16; do
        run "${tag:+$tag }mongostore events/s, $w worker(s) ($n executions)" \
            "$lua" "$here/events.lua" "$u" --n "$n" --workers "$w" --db "${prefix}${dbt}ms$w" --label "${tag}ms$w"
        run "${tag:+$tag }harel events/s, $w worker(s) ($n executions)" \
            "$py" "$here/harel_events.py" "$u" --n "$n" --workers "$w" --db "${prefix}${dbt}h$w" --label "${tag}h$w"
    done
}
if [[ -n $do_batching ]]; then
    echo "RESULT meta.batch_sizes $batch_ks $batch_events $delay_ms" >>"$results"
    proxy_uri="" proxy0_uri=""
    if proxy_uri=$(start_proxy "$delay_ms" "$uri") && proxy0_uri=$(start_proxy 0 "$uri"); then
        note "delay proxy (${delay_ms} ms each way) at $proxy_uri, delay 0 at $proxy0_uri"
        run "round trips direct and through the proxy (its own cost at delay 0)" \
            "$out/batch_limit" ping direct="$uri" proxy0="$proxy0_uri" proxy="$proxy_uri"
    else
        note "FAILED: the delay proxy did not start: the proxy rows read not measured"
        failures=$((failures + 1))
        echo "RESULT meta.failed.$failures tools/delay-proxy did not start" >>"$results"
        proxy_uri=""
    fi
    for net in lo px; do
        u=$uri
        if [[ $net == px ]]; then
            [[ -n $proxy_uri ]] || continue
            u=$proxy_uri
        fi
        run "batched vs one-event delivery, K = $batch_ks ($net)" \
            "$lua" "$here/batch.lua" "$u" --ks "$batch_ks" --events "$batch_events" --db "${prefix}b$net" --label "b.$net"
        run "libmongoc alone, batched round trips, K = $batch_ks ($net)" \
            "$out/batch_limit" "$u" "${prefix}bl$net" "bl.$net" "$batch_ks" "$batch_events"
    done
    # with the other execution rows, 1, 4 and 16 workers are the Events/s rows' (ms<W>, h<W>)
    [[ $parts == all ]] || workers_rows "" "$uri" "$batch_workers_n"
    # the counter change: the two settings take turns, so drift falls on both
    for r in 1 2; do
        for sb in 1 1000; do
            run "commits/s with emits, 16 workers, seq_block $sb, round $r ($counter_n executions)" \
                "$lua" "$here/events.lua" "$uri" --n "$counter_n" --workers 16 --emit 1 --seq-block "$sb" \
                --db "${prefix}c${sb}r$r" --label "c$sb.r$r"
        done
    done
    # one short pass on SecantusDB, loopback
    if [[ ${BENCH_SECANTUS:-1} != 0 ]]; then
        sec_dir=$(mktemp -d "$out/secantus.XXXXXX")
        if sec_uri=$("$root/tools/secantus-server" start "$sec_dir" 2>>"$log"); then
            note "SecantusDB at $sec_uri (pid $(cat "$sec_dir/server.pid"))"
            echo "RESULT meta.secantus $sec_events $sec_workers_n" >>"$results"
            warm "$lua" "$here/batch.lua" "$sec_uri" --ks 10 --events 100 --db "${prefix}warm_sb"
            run "SecantusDB: batched vs one-event delivery, K = $sec_ks" \
                "$lua" "$here/batch.lua" "$sec_uri" --ks "$sec_ks" --events "$sec_events" --db "${prefix}sb" --label "b.sec"
            run "SecantusDB: libmongoc alone, batched round trips, K = $sec_ks" \
                "$out/batch_limit" "$sec_uri" "${prefix}sbl" "bl.sec" "$sec_ks" "$sec_events"
            workers_rows "sec." "$sec_uri" "$sec_workers_n"
            "$root/tools/secantus-server" stop "$sec_dir" >/dev/null 2>&1 || true
            rm -rf "$sec_dir"
            sec_dir=""
        else
            note "FAILED: SecantusDB did not start (see $log): its rows read not measured"
            failures=$((failures + 1))
            echo "RESULT meta.failed.$failures SecantusDB did not start" >>"$results"
        fi
    fi
fi

# The OpenResty load rows: real nginx (examples/openresty) driven by wrk.
if [[ -n $do_openresty ]]; then
    if [[ $mode == quick ]]; then ngx_s=3 ngx_burst=5; else ngx_s=10 ngx_burst=30; fi
    echo "RESULT meta.openresty $ngx_s $ngx_burst" >>"$results"
    run "OpenResty: creates, events, a hot execution by send and by the inbox, timers after a ${ngx_burst}s burst" \
        env MONGOSTORE_TEST_URI="$uri" "$lua" "$here/openresty.lua" "$uri" --seconds "$ngx_s" --burst "$ngx_burst" \
        --connections 64 \
        --db "${prefix}ngx"
fi

# The latency and scale rows last: they leave up to a million executions in the server.
if [[ $parts == all ]]; then
    run "commit latency at events $points (budget ${commit_budget}s)" \
        "$lua" "$here/latency.lua" "$uri" --part commit --points "$points" --budget "$commit_budget" --db "${prefix}lat"
    run "commit latency with dedupe_window $short_window at events $short_points (budget ${short_budget}s)" \
        "$lua" "$here/latency.lua" "$uri" --part commit --points "$short_points" --budget "$short_budget" \
        --dedupe-window "$short_window" --db "${prefix}lat"
    run "sweeps, relays and listing at $scales executions" \
        "$lua" "$here/latency.lua" "$uri" --part scale --scales "$scales" --reps "$reps" --op-budget "$op_budget" \
        --skip "$skip" --python "$py" --db "${prefix}lat"
fi

echo "RESULT meta.loadavg_end $(cut -d' ' -f1-3 /proc/loadavg)" >>"$results"
echo "RESULT meta.elapsed_s $((SECONDS - started))" >>"$results"
note "done in $((SECONDS - started)) s (build, warm-up and measured round); writing $md"
echo >&2
"$lua" "$here/report.lua" "$results" "$md" "$mode" "$command" "$server" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$parts"
((failures == 0)) || { echo "run.sh: $failures benchmark step(s) failed (see $log)" >&2; exit 1; }
