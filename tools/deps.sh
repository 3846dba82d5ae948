#!/usr/bin/env bash
# Installs the Debian 12 packages needed to build and test mongostore.
# Idempotent: asks dpkg what is already installed and only then touches apt.
# Runs as root (CI) or through sudo.
set -euo pipefail

die() { echo "deps.sh: $*" >&2; exit 1; }

packages=(
    lua5.4 liblua5.4-dev libmongoc-dev libbson-dev libssl-dev pkg-config lua-unit
    luarocks gcc make curl ca-certificates valgrind python3 python3-venv lua-check
    # OpenResty side: LuaJIT as Debian's lua module links it, compat-5.3.h,
    # nginx with the lua module and resty.core
    luajit2 libluajit2-5.1-dev lua-compat53-dev nginx libnginx-mod-http-lua lua-resty-core
    # tools: LPeg for harel's .stm charts, Graphviz to render the diagrams,
    # tmux for the CLI's terminal spec, lua-cjson for the hostile-client specs
    # (client JSON as the common decoder gives it)
    lua-lpeg graphviz tmux lua-cjson
)
# make bench (tools/deps.sh bench) also drives real nginx with wrk for the
# OpenResty load rows.
if [[ ${1:-} == bench ]]; then packages+=(wrk); fi
# Any Java 17+ on PATH will do for the test server; only add one if none is.
if ! command -v java >/dev/null 2>&1; then
    packages+=(default-jre-headless)
fi
# Node.js and npm: the Mermaid diagrams are checked by mermaid's own parser,
# and make bench has Node rows (any node >= 16.20.1; Debian's nodejs 18 will
# do). Only when missing: a node installed another way keeps its own npm.
if ! command -v node >/dev/null 2>&1; then packages+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script expects Debian 12"

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
    echo "deps.sh: all packages already installed"
    exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    die "need root to install ${missing[*]}, and sudo is not available"
fi

echo "deps.sh: installing ${missing[*]}"

log=$(mktemp "${TMPDIR:-/tmp}/deps.XXXXXX.log")
trap 'rm -f "$log"' EXIT

apt() {
    # sudo drops the environment, so pass the frontend setting explicitly.
    if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        die "apt-get $1 failed (see the output above)"
    fi
}

# Slim images drop man directories, and the Java postinst scripts expect them.
if [[ " ${missing[*]} " == *" default-jre-headless "* ]]; then
    "${as_root[@]}" mkdir -p /usr/share/man/man1
fi

apt update -q
apt install -y -q --no-install-recommends "${missing[@]}"

for p in "${missing[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || die "package $p is still not installed after apt-get install"
done
