#!/bin/sh
# Run the Criterion test binaries given as arguments; print one summary.
# usage: run-tests.sh BUILD_DIR BIN...
build=$1; shift
failed=""
for t in "$@"; do
    name=$(basename "$t")
    echo "== $name"
    if ! MYALLOC_TEST_BUILD="$build" "$t" --jobs 2 --timeout 300; then
        failed="$failed $name"
    fi
done
if [ -n "$failed" ]; then
    echo "FAILED:$failed"
    exit 1
fi
echo "all unit test binaries passed"
