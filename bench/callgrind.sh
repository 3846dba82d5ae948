#!/usr/bin/env bash
# bench/callgrind.sh [n] - the client's instructions per document and per op
# of the document rows, counted by valgrind's callgrind (deterministic, unlike
# CPU times on a shared machine): one run of bench/documents.lua (its warm-up
# round included) with n documents (default 10000), and the inclusive count
# of each C entry point divided by the documents or ops it handled:
#   insert_many  l_insert_many (encoding, checks, libmongoc's part, results)
#   find         each_step (the decode of each document; the Lua loop that
#                visits the fields is not in it), and of that the decode
#                alone (ms_push_document: csrc/decode.c and the Lua calls
#                that build the tables)
#   update_one   l_update_one;  bulk_write  l_bulk_write
# Needs valgrind; uses MONGOSTORE_URI when set, else a test server of its own
# (tools/with-server). Not part of make bench or make test.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
n=${1:-10000}
updates=$((n / 10)) bulk=$((n / 10))
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 1; }
make -C "$root" --no-print-directory mongostore/core.so >/dev/null

if [[ -z ${MONGOSTORE_URI:-} ]]; then
    exec "$root/tools/with-server" "$0" "$@"
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/ms-callgrind.XXXXXX")
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out/cg" ${LUA:-lua5.4} "$here/documents.lua" \
    "$MONGOSTORE_URI" "msbench_cg_$$" cg 1 "$n" "$updates" "$bulk" >"$out/log" 2>&1 ||
    { tail -n 20 "$out/log" >&2; exit 1; }
callgrind_annotate --inclusive=yes "$out/cg" 2>/dev/null >"$out/ann"
count() { grep -m1 -E "[/?]:$1( |\$)" "$out/ann" | awk '{gsub(",", "", $1); print $1}'; }
# the warm-up round runs a tenth of each size, plus one
per() { echo $(( $(count "$1") / ($2 + $2 / 10 + 1) )); }
echo "instructions (callgrind, $n documents, $updates update_one, a bulk_write of $bulk):"
echo "  insert_many  $(per l_insert_many "$n") per document"
echo "  find         $(per each_step "$n") per document (decode)"
echo "    decode     $(per ms_push_document "$n") per document (ms_push_document alone)"
echo "  update_one   $(per l_update_one "$updates") per update"
echo "  bulk_write   $(per l_bulk_write "$bulk") per update"
