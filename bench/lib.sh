# Shared by bench/run.sh and bench/instr.sh (sourced, bash).
#
# Sets REPO (the repository root, from this file's location), BUILD_DIR
# (build/bench), and provides:
#   bench_build            compile bench/src/*.c into $BUILD_DIR/bin (-O2),
#                          and the null allocator into $BUILD_DIR/lib
#   bench_find_peers       fill PEER_PATH[name] / PEER_SKIP[name] for the
#                          peers, installing missing ones with apt-get, and
#                          drop them from the page cache (bench_drop_cache)
#   bench_myalloc          a private copy of lib/libmyalloc.so, likewise
#   bench_ensure_tool CMD PKG   install a tool (e.g. valgrind) if missing
#   bench_alloc_args       print --alloc/--skip arguments for the drivers

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
BUILD_DIR="$REPO/build/bench"
: "${CC:=cc}"
: "${PYTHON:=python3}"

msg() { printf '%s\n' "bench: $*" >&2; }

# Peers: name, sonames to look for (first found wins), Debian packages to
# try (first one apt knows wins: newer releases renamed some for t64).
PEERS=(jemalloc tcmalloc mimalloc)
declare -A PEER_SONAMES=(
    [jemalloc]="libjemalloc.so.2"
    [tcmalloc]="libtcmalloc_minimal.so.4"
    [mimalloc]="libmimalloc.so.2 libmimalloc.so.3"
)
declare -A PEER_PKGS=(
    [jemalloc]="libjemalloc2"
    [tcmalloc]="libtcmalloc-minimal4 libtcmalloc-minimal4t64"
    [mimalloc]="libmimalloc2.0 libmimalloc3"
)
declare -A PEER_PATH=()
declare -A PEER_SKIP=()

bench_build() {
    local out="$BUILD_DIR/bin" src name flags
    mkdir -p "$out"
    flags="-std=gnu11 -O2 -g -Wall -Wextra -pthread
           -fno-builtin-malloc -fno-builtin-free -fno-builtin-realloc -fno-builtin-calloc"
    for src in "$BENCH_DIR"/src/*.c; do
        name=$(basename "$src" .c)
        if [ "$out/$name" -nt "$src" ] && [ "$out/$name" -nt "$BENCH_DIR/src/bench.h" ] &&
           [ "$out/$name" -nt "$BENCH_DIR/lib.sh" ]; then
            continue
        fi
        # shellcheck disable=SC2086
        $CC $flags -o "$out/$name.tmp.$$" "$src" -ldl || { msg "failed to build $src"; return 1; }
        mv -f "$out/$name.tmp.$$" "$out/$name"
    done
    # The null allocator of the pair rows' floor (bench.py --floor).
    local null="$BUILD_DIR/lib/nullalloc.so" nsrc="$BENCH_DIR/src/preload/nullalloc.c"
    mkdir -p "$BUILD_DIR/lib"
    if ! [ "$null" -nt "$nsrc" ]; then
        $CC -std=gnu11 -O2 -Wall -Wextra -shared -fPIC -o "$null.tmp.$$" "$nsrc" ||
            { msg "failed to build $nsrc"; return 1; }
        mv -f "$null.tmp.$$" "$null"
    fi
}

# A library that can actually be preloaded (right architecture, loads).
loadable() {
    [ -f "$1" ] || return 1
    ! LD_PRELOAD="$1" /bin/true 2>&1 | grep -q .
}

find_soname() {
    local so=$1 p dir multi
    while read -r p; do
        if loadable "$p"; then echo "$p"; return 0; fi
    done < <(ldconfig -p 2>/dev/null | awk -v n="$so" '$1 == n { print $NF }')
    multi=$($CC -print-multiarch 2>/dev/null)
    for dir in ${multi:+/usr/lib/$multi /lib/$multi} /usr/lib64 /usr/lib /usr/local/lib; do
        if loadable "$dir/$so"; then echo "$dir/$so"; return 0; fi
    done
    return 1
}

find_peer() {
    local name=$1 so p
    for so in ${PEER_SONAMES[$name]}; do
        if p=$(find_soname "$so"); then PEER_PATH[$name]=$p; return 0; fi
    done
    return 1
}

# How to run apt-get as root: "", "sudo -n", or fail.
apt_prefix() {
    command -v apt-get >/dev/null 2>&1 || return 1
    if [ "$(id -u)" = 0 ]; then echo ""; return 0; fi
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then echo "sudo -n"; return 0; fi
    return 1
}

APT_UPDATED=0
# Install the first known package of each group given ("a b|c d" = a or b, c or d).
# Prints nothing; returns non-zero when it could not run apt-get.
apt_install_groups() {
    local prefix groups=("$@") pkgs=() g p chosen
    prefix=$(apt_prefix) || return 1
    if [ $APT_UPDATED = 0 ]; then
        msg "apt-get update"
        $prefix apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || msg "apt-get update failed"
        APT_UPDATED=1
    fi
    for g in "${groups[@]}"; do
        chosen=""
        for p in $g; do
            if apt-cache show "$p" >/dev/null 2>&1; then chosen=$p; break; fi
        done
        pkgs+=("${chosen:-${g%% *}}")
    done
    msg "apt-get install ${pkgs[*]}"
    $prefix env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
        --no-install-recommends "${pkgs[@]}" >&2 || msg "apt-get install failed"
    return 0
}

bench_find_peers() {
    find_peers
    local name
    for name in "${PEERS[@]}"; do
        [ -z "${PEER_PATH[$name]:-}" ] || bench_drop_cache "${PEER_PATH[$name]}"
    done
}

find_peers() {
    local name missing=() groups=() cmd
    for name in "${PEERS[@]}"; do
        find_peer "$name" || missing+=("$name")
    done
    [ ${#missing[@]} = 0 ] && return 0
    for name in "${missing[@]}"; do groups+=("${PEER_PKGS[$name]}"); done
    if [ "${BENCH_NO_INSTALL:-0}" = 1 ] || ! apt_install_groups "${groups[@]}"; then
        for name in "${missing[@]}"; do
            cmd="sudo apt-get update && sudo apt-get install -y ${PEER_PKGS[$name]%% *}"
            if ! command -v apt-get >/dev/null 2>&1; then
                PEER_SKIP[$name]="not installed (no apt-get: install ${PEER_SONAMES[$name]%% *})"
            else
                PEER_SKIP[$name]="not installed; run: $cmd"
            fi
            msg "skipping $name: ${PEER_SKIP[$name]}"
        done
        return 0
    fi
    for name in "${missing[@]}"; do
        if ! find_peer "$name"; then
            PEER_SKIP[$name]="install failed; try: sudo apt-get install -y ${PEER_PKGS[$name]%% *}"
            msg "skipping $name: ${PEER_SKIP[$name]}"
        fi
    done
}

# bench_ensure_tool COMMAND PACKAGE: install PACKAGE if COMMAND is missing.
bench_ensure_tool() {
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "${BENCH_NO_INSTALL:-0}" = 1 ] || ! apt_install_groups "$2"; then
        msg "$1 is missing; run: sudo apt-get update && sudo apt-get install -y $2"
        return 1
    fi
    command -v "$1" >/dev/null 2>&1
}

# Drop a library from the page cache (where no process maps it), so that
# the runs read it from disk, every allocator's alike. How much of a
# library's file a process keeps resident depends on how the file entered
# the page cache: a file just written stays cached in large folios, and a
# fault maps a whole folio. maxrss of `pairs 16 1000` (kernel 6.18), as
# found / a fresh copy / a copy read back from disk: libmyalloc.so -,
# 1,732, 1,684 KiB; mimalloc 1,796, 1,824, 1,676; tcmalloc 6,844, 6,820,
# 6,764; jemalloc 3,664, 3,704, 3,700.
bench_drop_cache() {
    sync "$1" 2>/dev/null
    dd if="$1" iflag=nocache count=0 status=none 2>/dev/null || true
}

# Copy a library to DST, dropped from the page cache.
bench_cold_copy() {
    cp "$1" "$2.tmp.$$" && mv -f "$2.tmp.$$" "$2" || return 1
    bench_drop_cache "$2"
}

# A private copy of lib/libmyalloc.so for this run: in a shared tree a
# concurrent `make` rewrites lib/libmyalloc.so in place, and processes that
# have it mapped then die of SIGBUS or run a different build half-way.
bench_myalloc() {
    local lib="$REPO/lib/libmyalloc.so" snap="$BUILD_DIR/lib/libmyalloc.so" try
    if [ ! -f "$lib" ]; then
        msg "building lib/libmyalloc.so"
        make -C "$REPO" --no-print-directory lib >&2 || return 1
    fi
    mkdir -p "$BUILD_DIR/lib"
    for try in 1 2 3; do
        bench_cold_copy "$lib" "$snap"
        if loadable "$snap"; then echo "$snap"; return 0; fi
        sleep 2
    done
    msg "cannot load $lib (being rebuilt?)"
    return 1
}

# The driver arguments: myalloc, glibc, then the peers in order.
bench_alloc_args() {
    local name
    printf -- '--alloc\nmyalloc=%s\n--alloc\nglibc=\n' "$1"
    for name in "${PEERS[@]}"; do
        if [ -n "${PEER_PATH[$name]:-}" ]; then
            printf -- '--alloc\n%s=%s\n' "$name" "${PEER_PATH[$name]}"
        else
            printf -- '--skip\n%s=%s\n' "$name" "${PEER_SKIP[$name]:-not found}"
        fi
    done
}
