#!/bin/sh
# Install what tools/check-real.sh (make check-real) needs on a fresh Debian
# machine: sqlite3, git, gcc, g++, make, python3 with its test suite
# (Debian ships /usr/lib/python3.X/test/test_* in libpython3.X-testsuite),
# coreutils, diffutils, mawk; and what tools/check-redis.sh (make
# check-redis) needs: redis-server and redis-tools (redis-cli,
# redis-benchmark); and what test_prof_formats (make unit) reads profiles
# with: go (golang-go: go tool pprof), xmllint (libxml2-utils), gzip; and
# what make check-ubsan links: gcc's UBSan runtime (libubsan1).
# Only what is missing is installed, with
# apt-get, non-interactively and quietly. Meant for CI (.ci/run); check-real
# itself never installs anything, it reports what is missing as SKIP.
#
# Exits non-zero if something is missing and cannot be installed, so that
# CI does not go green on a check-real that skipped everything.
set -eu

have() { command -v "$1" >/dev/null 2>&1; }

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then
        SUDO="sudo -n"
    fi
fi

updated=0
install() {
    [ $# -gt 0 ] || return 0
    if ! have apt-get; then
        echo "ci-deps: no apt-get here; install these by hand: $*" >&2
        exit 1
    fi
    if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
        echo "ci-deps: not root and no sudo; install these by hand: $*" >&2
        exit 1
    fi
    echo "ci-deps: installing $*"
    log=$(mktemp)
    if { [ "$updated" = 1 ] || $SUDO apt-get update -qq; } >"$log" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1; then
        updated=1
        rm -f "$log"
    else
        cat "$log" >&2
        rm -f "$log"
        echo "ci-deps: apt-get could not install: $*" >&2
        exit 1
    fi
}

# Programs (and the packages that provide them).
missing=
have sqlite3 || missing="$missing sqlite3"
have git || missing="$missing git"
have gcc || missing="$missing gcc"
have g++ || missing="$missing g++"
have make || missing="$missing make"
have awk || missing="$missing mawk"
have diff && have cmp || missing="$missing diffutils"
for t in sort timeout mktemp md5sum seq; do
    have "$t" || { missing="$missing coreutils"; break; }
done
[ -x /usr/bin/python3 ] || missing="$missing python3"
# check-redis: Debian's redis-server (linked against libjemalloc).
have redis-server || missing="$missing redis-server"
have redis-cli && have redis-benchmark || missing="$missing redis-tools"
# test_prof_formats: go tool pprof reads our protobuf, xmllint our SVG.
have go || missing="$missing golang-go"
have xmllint || missing="$missing libxml2-utils"
have gzip || missing="$missing gzip"
# test_prof_stats: jeprof reads our text profiles (it needs binutils too).
have jeprof || missing="$missing libjemalloc-dev"
have objdump || missing="$missing binutils"
# gcc without recommends has no C library headers.
[ -f /usr/include/stdio.h ] || missing="$missing libc6-dev"
# shellcheck disable=SC2086
install $missing

# make check-ubsan: gcc's UBSan runtime (libubsan1, which gcc's own
# libgcc-N-dev depends on: normally there with gcc).
ubsan_links() {
    printf 'int main(void){return 0;}\n' | gcc -fsanitize=undefined -x c -o /dev/null - 2>/dev/null
}
ubsan_links || install libubsan1

# Debian's python3 keeps only test.support in libpython3.X-stdlib; the test
# modules (test_json, ...) are in libpython3.X-testsuite.
pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ ! -d "/usr/lib/python$pyver/test/test_json" ]; then
    install "libpython$pyver-testsuite"
fi

# Check the result: the same things check-real looks for.
for t in sqlite3 git gcc g++ make awk sort timeout redis-server redis-cli redis-benchmark go xmllint gzip; do
    have "$t" || { echo "ci-deps: $t is still missing" >&2; exit 1; }
done
ubsan_links || { echo "ci-deps: gcc -fsanitize=undefined still does not link" >&2; exit 1; }
if ! /usr/bin/python3 -c 'import test.support, test.libregrtest, test.test_json' 2>/dev/null; then
    echo "ci-deps: /usr/bin/python3's test suite is still missing" >&2
    exit 1
fi
echo "ci-deps: check-real's and check-redis's programs are installed"
