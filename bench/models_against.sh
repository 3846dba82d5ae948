#!/usr/bin/env bash
# bench/models_against.sh <git-rev> [rounds] - the model rows (bench/models.lua,
# label model) of this checkout and of <git-rev>, side by side in one run:
# the two trees take turns, round after round, against one test server, and
# the medians of each op's client CPU (os.clock over the op) and of its per-round ratio
# are printed. For "the models' CPU per operation stays within x% of <rev>".
# <git-rev>'s tree is checked out under bench/out/against-<rev> and built there.
# MONGOSTORE_URI names a server to use; otherwise tools/with-server starts one.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
rev=${1:?usage: bench/models_against.sh <git-rev> [rounds]}
rounds=${2:-7}
lua=${LUA:-lua5.4}
if [[ -z ${MONGOSTORE_URI:-} ]]; then exec "$root/tools/with-server" "$0" "$@"; fi
old=$here/out/against-$(git -C "$root" rev-parse --short "$rev")
mkdir -p "$here/out"
git -C "$root" worktree add --force --detach "$old" "$rev" >/dev/null
# the old tree goes away at the end (make lint reads every .lua under bench/)
trap 'git -C "$root" worktree remove --force "$old" 2>/dev/null || true' EXIT
make -C "$root" -s mongostore/core.so >/dev/null
make -C "$old" -s mongostore/core.so >/dev/null
cp "$root/bench/models.lua" "$old/bench/models-against.lua"
out=$here/out/models-against.txt
: >"$out"
for r in $(seq 1 "$rounds"); do
    # the order turns each round
    if (( r % 2 )); then trees="new old"; else trees="old new"; fi
    for t in $trees; do
        if [[ $t == new ]]; then script=$root/bench/models.lua; else script=$old/bench/models-against.lua; fi
        "$lua" "$script" "$MONGOSTORE_URI" "msbench_against_$$_${t}_$r" model "$r" 2>/dev/null \
            | sed -n "s/^RESULT models\.model\.r[0-9]*\.\([a-z_]*\)_cpu_ms /$t $r \1 /p" >>"$out"
    done
done
"$lua" - "$out" "$rev" <<'LUA'
local file, rev = arg[1], arg[2]
local rows, rounds = {}, {}
for line in io.lines(file) do
  local tree, r, op, v = line:match("^(%S+) (%S+) (%S+) (%S+)$")
  rows[op] = rows[op] or {}
  rows[op][r] = rows[op][r] or {}
  rows[op][r][tree] = tonumber(v)
  rounds[r] = true
end
local function median(t)
  table.sort(t)
  local n = #t
  return n % 2 == 1 and t[(n + 1) // 2] or (t[n // 2] + t[n // 2 + 1]) / 2
end
local nr = 0
for _ in pairs(rounds) do nr = nr + 1 end
print(string.format("%-10s %12s %12s %8s   (client CPU ms, medians of %d rounds; the ratio is the median of each "
  .. "round's new/old; old = %s)", "op", "old", "new", "new/old", nr, rev))
for _, op in ipairs { "insert", "load", "save", "bulk_save", "update" } do
  local olds, news, ratios = {}, {}, {}
  for _, pair in pairs(rows[op]) do
    if pair.old and pair.new then
      olds[#olds + 1], news[#news + 1], ratios[#ratios + 1] = pair.old, pair.new, pair.new / pair.old
    end
  end
  print(string.format("%-10s %12.1f %12.1f %8.3f", op, median(olds), median(news), median(ratios)))
end
LUA
