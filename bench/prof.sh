#!/usr/bin/env bash
# make bench-prof: what the heap profiler costs (CPU overhead at the default
# rate, cost per sample, memory per sampled object), for myalloc and
# jemalloc. See "Profiler" in bench/README.md.
#
#   BENCH_REPS=7        paired repetitions of the cost runs (the overhead
#                       runs get 2 x BENCH_REPS + 1); medians are reported
#   BENCH_QUICK=1       smoke run: a quarter of the work, 3 repetitions
#   BENCH_FILTER=regex  only the cases matching (bench/prof.sh --list)
#   BENCH_NO_INSTALL=1  never run apt-get for a missing jemalloc
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_build
# The frame-pointer build of the prof program, for prof_bt:fp.
fp="$BUILD_DIR/bin-fp"
mkdir -p "$fp"
for dep in "$BENCH_DIR/src/prof.c" "$BENCH_DIR/src/bench.h" "$BENCH_DIR/prof.sh"; do
    if ! [ "$fp/prof" -nt "$dep" ]; then
        $CC -std=gnu11 -O2 -g -Wall -Wextra -pthread -fno-omit-frame-pointer \
            -fno-builtin-malloc -fno-builtin-free -fno-builtin-realloc -fno-builtin-calloc \
            -o "$fp/prof.tmp.$$" "$BENCH_DIR/src/prof.c" -ldl ||
            { msg "failed to build the frame-pointer prof"; exit 1; }
        mv -f "$fp/prof.tmp.$$" "$fp/prof"
        break
    fi
done
# A copy of the snapshot of its own: a `make bench` started meanwhile (in a
# shared tree) replaces build/bench/lib/libmyalloc.so with whatever
# lib/libmyalloc.so is at that moment.
snap=$(bench_myalloc)
priv="$BUILD_DIR/lib/prof.$$"
mkdir -p "$priv"
trap 'rm -rf "$priv"' EXIT
bench_cold_copy "$snap" "$priv/libmyalloc.so"
# shellcheck disable=SC2034 # read by bench_find_peers (lib.sh)
PEERS=(jemalloc) # the only peer with a heap profiler to compare with
bench_find_peers
"$PYTHON" "$BENCH_DIR/prof.py" --bin "$BUILD_DIR/bin" --fp-bin "$fp" \
    --out "$BENCH_DIR/results" --repo "$REPO" --myalloc "$priv/libmyalloc.so" \
    --jemalloc "${PEER_PATH[jemalloc]:-}" --jemalloc-skip "${PEER_SKIP[jemalloc]:-}" "$@"
