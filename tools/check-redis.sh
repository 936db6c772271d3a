#!/usr/bin/env bash
# check-redis: a real jemalloc client on myalloc.
#
# Debian's redis-server is linked against libjemalloc and reads the
# allocator through mallctl (epoch, stats.allocated, stats.active,
# stats.resident, arenas.narenas, arena.<i>.purge, background_thread),
# nallocx, malloc_usable_size and malloc_stats_print. This script starts it
# on 127.0.0.1 (a random free port) with LD_PRELOAD set to a private copy
# of lib/libmyalloc.so, writes a known data set, runs redis-benchmark with a
# bounded request count, and checks:
#   - the server runs on myalloc (/proc/<pid>/maps has our library; INFO's
#     mem_allocator is jemalloc-<version>, so redis took the jemalloc paths)
#   - INFO memory: allocator_allocated / allocator_active /
#     allocator_resident present, non-zero, allocated <= active <= resident,
#     allocated near used_memory (redis's own count of usable sizes),
#     resident not above the process's RSS
#   - MEMORY STATS (allocator.* agree with INFO), MEMORY MALLOC-STATS (our
#     malloc_stats_print text), MEMORY DOCTOR, MEMORY PURGE, MEMORY USAGE
#   - the data set reads back intact after the benchmark
#   - SHUTDOWN NOSAVE exits 0, and the server log has no "<myalloc>:" line
#
# One line per check: PASS, FAIL (with details) or SKIP. Exit 0 when nothing
# failed; when redis-server is not installed, one SKIP line and exit 0
# (tools/ci-deps.sh installs redis-server and redis-tools for CI).
#
# environment:
#   CHECK_REDIS_REQUESTS  requests per redis-benchmark test (20000)
#   CHECK_REDIS_TIMEOUT   seconds any one step may take (120)
#   CHECK_REDIS_KEEP=1    keep the work directory (its path is printed)
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILT=$ROOT/lib/libmyalloc.so
REQUESTS=${CHECK_REDIS_REQUESTS:-20000}
TIMEOUT=${CHECK_REDIS_TIMEOUT:-120}

have() { command -v "$1" >/dev/null 2>&1; }

if ! have redis-server; then
    echo "SKIP  redis      redis-server is not installed (apt-get install redis-server redis-tools)"
    echo "check-redis: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
for t in redis-cli redis-benchmark; do
    if ! have "$t"; then
        echo "SKIP  redis      $t is not installed (apt-get install redis-tools)"
        echo "check-redis: 0 passed, 0 failed, 1 skipped"
        exit 0
    fi
done
if [ ! -f "$BUILT" ]; then
    echo "check-redis: $BUILT is missing (run make first)" >&2
    exit 2
fi

unset LD_PRELOAD LD_LIBRARY_PATH MYALLOC_CONF MALLOC_CONF GLIBC_TUNABLES
export LC_ALL=C

WORK=$(mktemp -d "${TMPDIR:-/tmp}/check-redis.XXXXXX") || exit 2
PID=
cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
        kill "$PID" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$PID" 2>/dev/null || break
            sleep 0.2
        done
        kill -9 "$PID" 2>/dev/null
    fi
    if [ "${CHECK_REDIS_KEEP:-0}" = 1 ]; then
        echo "check-redis: work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# A private copy: a rebuild meanwhile must not change the library under the
# running server.
LIB=$WORK/libmyalloc.so
cp "$BUILT" "$LIB" || exit 2

npass=0 nfail=0 nskip=0
pass() { npass=$((npass + 1)); printf 'PASS  %-22s %s\n' "$1" "$2"; }
skip() { nskip=$((nskip + 1)); printf 'SKIP  %-22s %s\n' "$1" "$2"; }
fail() {
    nfail=$((nfail + 1))
    printf 'FAIL  %-22s %s\n' "$1" "$2"
    if [ $# -ge 3 ] && [ -n "$3" ]; then
        printf '%s\n' "$3" | head -30 | sed 's/^/      /'
    fi
}
finish() {
    echo "check-redis: $npass passed, $nfail failed, $nskip skipped"
    [ "$nfail" -eq 0 ]
    exit $?
}

# ---------------------------------------------------------------------------
# Start the server.

port_free() {
    ! ss -ltnH 2>/dev/null | awk '{print $4}' | grep -q ":$1\$"
}

cli() { timeout "$TIMEOUT" redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }

start_server() {
    PORT=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    port_free "$PORT" || return 1
    env LD_PRELOAD="$LIB" redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no \
        --dir "$WORK" --logfile "$WORK/redis.log" --daemonize no --protected-mode yes \
        >"$WORK/redis.out" 2>&1 &
    PID=$!
    for _ in $(seq 1 100); do
        if [ "$(cli ping 2>/dev/null)" = PONG ]; then
            return 0
        fi
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    kill "$PID" 2>/dev/null
    wait "$PID" 2>/dev/null
    PID=
    return 1
}

started=0
for _ in 1 2 3 4 5; do
    if start_server; then
        started=1
        break
    fi
done
if [ "$started" != 1 ]; then
    fail start "redis-server did not answer PING on 127.0.0.1 (5 ports tried)" \
        "$(cat "$WORK/redis.out" "$WORK/redis.log" 2>/dev/null | tail -20)"
    finish
fi
pass start "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$PORT, pid $PID"

# ---------------------------------------------------------------------------
# Is it on myalloc?

if grep -q "$LIB" "/proc/$PID/maps"; then
    pass preloaded "/proc/$PID/maps maps $LIB"
else
    fail preloaded "/proc/$PID/maps does not map $LIB"
fi

info() { cli info memory | tr -d '\r'; }
field() { printf '%s\n' "$1" | sed -n "s/^$2:\\(.*\\)\$/\\1/p"; }

INFO=$(info)
allocator=$(field "$INFO" mem_allocator)
case "$allocator" in
jemalloc-*)
    pass mem_allocator "$allocator (redis reads the allocator through mallctl)"
    ;;
*)
    fail mem_allocator "mem_allocator is '$allocator': this redis-server is not built on jemalloc, nothing calls mallctl"
    finish
    ;;
esac

# ---------------------------------------------------------------------------
# A known data set, written before the benchmark.

LETTERS=abcdefghijklmnopqrstuvwxyz
value() { # key index -> a value of 1 .. ~70000 bytes, deterministic
    local i=$1 n
    n=$(((i * 7919) % (i % 10 == 0 ? 70000 : 2000) + 1))
    head -c "$n" /dev/zero | tr '\0' "${LETTERS:i%26:1}"
    printf ':%d' "$i"
}

NKEYS=600
{
    for i in $(seq 1 $NKEYS); do
        printf 'SET check:key:%d %s\n' "$i" "$(value "$i")"
    done
    for i in $(seq 1 500); do
        printf 'RPUSH check:list item-%d\n' "$i"
        printf 'HSET check:hash field-%d value-%d\n' "$i" $((i * i))
        printf 'SADD check:set member-%d\n' "$i"
        printf 'ZADD check:zset %d z-%d\n' $((i * 3)) "$i"
    done
} >"$WORK/load.txt"
for i in $(seq 1 $NKEYS); do
    value "$i"
    echo
done >"$WORK/expected.txt"

read_back() {
    for i in $(seq 1 $NKEYS); do echo "GET check:key:$i"; done | cli --raw
    cli --raw lrange check:list 0 -1
    cli --raw hgetall check:hash | paste - - | sort
    cli --raw smembers check:set | sort
    cli --raw zrange check:zset 0 -1 withscores
}

if ! cli <"$WORK/load.txt" >"$WORK/load.out" 2>&1; then
    fail load "writing the data set failed" "$(tail -5 "$WORK/load.out")"
fi
read_back >"$WORK/before.txt" 2>&1
head -n $NKEYS "$WORK/before.txt" >"$WORK/before.keys"
if cmp -s "$WORK/before.keys" "$WORK/expected.txt" && [ "$(wc -l <"$WORK/before.txt")" -eq $((NKEYS + 500 + 500 + 500 + 1000)) ]; then
    pass load "$NKEYS strings (1 B .. 70 KB), a list, a hash, a set, a sorted set"
else
    fail load "the data set does not read back as written" "$(diff "$WORK/expected.txt" "$WORK/before.keys" | head -5)"
fi

# ---------------------------------------------------------------------------
# The benchmark (its own keys: key:*, counter:*, mylist, myhash, ...).

bench() {
    timeout "$TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$PORT" -q "$@" 2>&1 | tr '\r' '\n' |
        grep -v 'rps=' | grep -v '^ *$'
}
{
    bench -n "$REQUESTS" -c 20 -P 16 -r 100000 -d 256 -t set,get,incr,lpush,rpush,lpop,sadd,hset,spop,zadd,mset
    bench -n $((REQUESTS / 10)) -c 10 -r 2000 -d 30000 -t set,get,lpush
    bench -n $((REQUESTS / 4)) -c 4 -r 1000 -d 3 -t lrange_100
} >"$WORK/bench.txt"
# 11 + 3 tests, and lrange_100 reports its LPUSH fill too.
nres=$(grep -c 'requests per second' "$WORK/bench.txt")
if [ "$nres" -ge 16 ]; then
    pass benchmark "$nres tests, $REQUESTS requests each (fewer for 30 KB values): $(grep '^ *SET' "$WORK/bench.txt" | head -1 | sed 's/^ *//')"
else
    fail benchmark "redis-benchmark gave $nres results, not 16" "$(tail -10 "$WORK/bench.txt")"
fi
if ! kill -0 "$PID" 2>/dev/null; then
    fail alive "redis-server died during the benchmark" "$(tail -30 "$WORK/redis.log")"
    PID=
    finish
fi

# ---------------------------------------------------------------------------
# INFO memory.

INFO=$(info)
alloc=$(field "$INFO" allocator_allocated)
active=$(field "$INFO" allocator_active)
resident=$(field "$INFO" allocator_resident)
used=$(field "$INFO" used_memory)
rss=$(field "$INFO" used_memory_rss)
dbsize=$(cli dbsize)
numeric() { case "$1" in '' | *[!0-9]*) return 1 ;; *) [ "$1" -gt 0 ] ;; esac; }
if numeric "$alloc" && numeric "$active" && numeric "$resident" && numeric "$used" && numeric "$rss"; then
    pass info-fields "allocator_allocated $alloc, allocator_active $active, allocator_resident $resident ($dbsize keys)"
    problems=
    [ "$alloc" -le "$active" ] || problems="$problems allocated > active;"
    [ "$active" -le "$resident" ] || problems="$problems active > resident;"
    # used_memory: redis's count of usable sizes of what it holds; the
    # allocator also counts other libraries' objects and its thread caches.
    [ "$used" -le $((alloc + alloc / 20 + 1048576)) ] || problems="$problems used_memory $used > allocated + 5%;"
    [ "$alloc" -le $((used + used / 2 + 33554432)) ] || problems="$problems allocated > used_memory + 50% + 32 MiB;"
    # Our resident pages are part of the process's RSS.
    [ "$resident" -le $((rss + rss / 10 + 1048576)) ] || problems="$problems resident > RSS ($rss) + 10%;"
    if [ -z "$problems" ]; then
        pass info-consistent "allocated <= active <= resident <= RSS $rss; used_memory $used"
    else
        fail info-consistent "$problems" "$(printf '%s\n' "$INFO" | grep -E '^(used_memory|used_memory_rss|allocator_)')"
    fi
else
    fail info-fields "missing or zero allocator fields" "$(printf '%s\n' "$INFO" | grep -E '^(used_memory|allocator_|mem_allocator)')"
fi

# ---------------------------------------------------------------------------
# MEMORY commands.

stats=$(cli memory stats | tr -d '\r')
s_alloc=$(printf '%s\n' "$stats" | sed -n '/^allocator.allocated$/{n;p;}')
s_res=$(printf '%s\n' "$stats" | sed -n '/^allocator.resident$/{n;p;}')
if numeric "$s_alloc" && numeric "$s_res" && [ "$s_alloc" -le $((alloc * 11 / 10 + 1048576)) ] &&
    [ "$s_alloc" -ge $((alloc * 9 / 10)) ]; then
    pass memory-stats "allocator.allocated $s_alloc, allocator.resident $s_res (INFO said $alloc, $resident)"
else
    fail memory-stats "allocator.allocated '$s_alloc' does not agree with INFO's $alloc" "$(printf '%s\n' "$stats" | head -40)"
fi

cli memory malloc-stats >"$WORK/malloc-stats.txt" 2>&1
if grep -q '___ Begin myalloc statistics ___' "$WORK/malloc-stats.txt" &&
    grep -q 'stats.allocated: [1-9]' "$WORK/malloc-stats.txt" &&
    grep -q 'Merged arenas:' "$WORK/malloc-stats.txt"; then
    pass memory-malloc-stats "our malloc_stats_print text, $(wc -l <"$WORK/malloc-stats.txt") lines"
else
    fail memory-malloc-stats "MEMORY MALLOC-STATS does not print myalloc's statistics" "$(head -10 "$WORK/malloc-stats.txt")"
fi

doctor=$(cli memory doctor 2>&1)
case "$doctor" in
'' | ERR* | *"Could not connect"*)
    fail memory-doctor "MEMORY DOCTOR: '$doctor'"
    ;;
*)
    pass memory-doctor "$(printf '%s' "$doctor" | head -c 100 | tr '\n' ' ')..."
    ;;
esac

usage=$(cli memory usage check:key:10)
if numeric "$usage" && [ "$usage" -ge 10000 ]; then
    pass memory-usage "MEMORY USAGE check:key:10 = $usage"
else
    fail memory-usage "MEMORY USAGE check:key:10 = '$usage'"
fi

# MEMORY PURGE calls mallctl("arena.<MALLCTL_ARENAS_ALL>.purge").
cli del check:unused >/dev/null
purge=$(cli memory purge)
after=$(field "$(info)" allocator_resident)
if [ "$purge" = OK ] && numeric "$after"; then
    pass memory-purge "OK; allocator_resident $resident -> $after"
else
    fail memory-purge "MEMORY PURGE answered '$purge'"
fi

# ---------------------------------------------------------------------------
# The data set is intact.

read_back >"$WORK/after.txt" 2>&1
if cmp -s "$WORK/before.txt" "$WORK/after.txt"; then
    pass data-intact "$(wc -c <"$WORK/after.txt") bytes read back as written"
else
    fail data-intact "the data set changed" "$(diff "$WORK/before.txt" "$WORK/after.txt" | head -c 2000)"
fi

# ---------------------------------------------------------------------------
# Shut down.

cli shutdown nosave >/dev/null 2>&1
status=
for _ in $(seq 1 100); do
    if ! kill -0 "$PID" 2>/dev/null; then
        wait "$PID"
        status=$?
        break
    fi
    sleep 0.1
done
if [ "$status" = 0 ]; then
    pass shutdown "SHUTDOWN NOSAVE, exit status 0"
    PID=
else
    fail shutdown "redis-server did not exit cleanly (status '${status:-still running}')" "$(tail -20 "$WORK/redis.log")"
fi
if grep -q '<myalloc>:' "$WORK/redis.log" "$WORK/redis.out" 2>/dev/null; then
    fail server-log "myalloc complained" "$(grep -h '<myalloc>:' "$WORK/redis.log" "$WORK/redis.out" | head -5)"
elif grep -qiE 'crashed by signal|BUG REPORT' "$WORK/redis.log"; then
    fail server-log "redis-server crashed" "$(grep -iE -A5 'crashed by signal|BUG REPORT' "$WORK/redis.log" | head -20)"
else
    pass server-log "no allocator messages, no crash"
fi

finish
