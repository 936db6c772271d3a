#!/usr/bin/env bash
# make bench-footprint: how much memory myalloc keeps against glibc,
# jemalloc, tcmalloc and mimalloc (peak RSS, RSS after freeing most of the
# heap, final RSS over live bytes, RSS after freeing everything and idling).
# See "Footprint" in bench/README.md.
#
#   BENCH_REPS=3            repetitions (medians are reported; quick: 2)
#   BENCH_QUICK=1           smoke run: a quarter of the sizes, 2 repetitions
#   BENCH_FILTER=regex      only the workloads matching (frag, server, threads)
#   BENCH_TIMEOUT=s         per-run time limit (default 120)
#   BENCH_NO_INSTALL=1      never run apt-get for missing peers
#   FOOTPRINT_IDLE_MS=2000  how long each program idles before the last RSS reading
#   FOOTPRINT_SERVER_MS=8000  wall time over which the server load rises and falls
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_build
# A copy of the snapshot of its own (a `make bench` started meanwhile in a
# shared tree replaces build/bench/lib/libmyalloc.so).
snap=$(bench_myalloc)
priv="$BUILD_DIR/lib/footprint.$$"
mkdir -p "$priv"
trap 'rm -rf "$priv"' EXIT
bench_cold_copy "$snap" "$priv/libmyalloc.so"
bench_find_peers
mapfile -t args < <(bench_alloc_args "$priv/libmyalloc.so")
"$PYTHON" "$BENCH_DIR/footprint.py" --bin "$BUILD_DIR/bin" --out "$BENCH_DIR/results" \
    --repo "$REPO" "${args[@]}" "$@"
