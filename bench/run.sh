#!/usr/bin/env bash
# make bench: speed and memory of myalloc against glibc, jemalloc, tcmalloc
# and mimalloc. See bench/README.md.
#
#   BENCH_REPS=5        repetitions (medians are reported)
#   BENCH_QUICK=1       smoke run: 15% of the work, 3 repetitions
#   BENCH_FILTER=regex  only workloads whose "name/threads" matches
#   BENCH_TIMEOUT=s     per-run time limit (default 120, quick 30)
#   BENCH_NO_INSTALL=1  never run apt-get for missing peers
#   BENCH_PROF=0        skip the profiler section run at the end (bench/prof.sh)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_build
myalloc=$(bench_myalloc)
bench_find_peers
mapfile -t args < <(bench_alloc_args "$myalloc")
rc=0
"$PYTHON" "$BENCH_DIR/bench.py" --bin "$BUILD_DIR/bin" --out "$BENCH_DIR/results" \
    --repo "$REPO" --floor "$BUILD_DIR/lib/nullalloc.so" "${args[@]}" "$@" || rc=$?
# Then the profiler's cost (bench/prof.sh, also `make bench-prof`), with the
# same BENCH_* settings; BENCH_PROF=0 leaves it out.
if [ "${BENCH_PROF:-1}" != 0 ]; then
    echo
    "$BENCH_DIR/prof.sh" "$@" || { prc=$?; [ $rc != 0 ] || rc=$prc; }
fi
exit $rc
