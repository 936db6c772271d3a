#!/usr/bin/env bash
# make bench-instr: instructions per malloc+free pair under callgrind, for
# myalloc, glibc, jemalloc, tcmalloc and mimalloc, and what profiling costs
# in instructions (myalloc and jemalloc). See bench/README.md.
#
#   BENCH_QUICK=1       1/10 of the iterations
#   BENCH_FILTER=regex  only the cases (pair-16, pair-64, pair-256, batch-64,
#                       prodcons-1+1, larson-1k-2, prof-rand-16-72,
#                       prof-batch-mixed, prof-larson-1k, prof-larson-32k)
#                       matching
#   BENCH_NO_INSTALL=1  never run apt-get for missing peers or valgrind
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_build
myalloc=$(bench_myalloc)
bench_find_peers
if ! bench_ensure_tool valgrind valgrind || ! command -v callgrind_annotate >/dev/null; then
    msg "bench-instr needs valgrind (and its callgrind_annotate)"
    exit 1
fi
mapfile -t args < <(bench_alloc_args "$myalloc")
exec "$PYTHON" "$BENCH_DIR/instr.py" --bin "$BUILD_DIR/bin" --out "$BENCH_DIR/results" \
    --repo "$REPO" "${args[@]}" "$@"
