#!/usr/bin/env bash
# check-real: real programs under LD_PRELOAD=lib/libmyalloc.so must give the
# same output as on the system malloc.
#
# For each program a scenario runs twice, each time in a fresh directory made
# by mktemp -d: once on the system malloc ("sys") and once with LD_PRELOAD
# set to the absolute path of lib/libmyalloc.so ("my"; a copy of it taken
# at the start, so that a rebuild meanwhile cannot change it under us). The two outputs
# (stdout and stderr of every step, with each step's exit status) are
# compared byte for byte after removing what legitimately differs (the temp
# directory's name, timings). Every scenario is deterministic: fixed inputs,
# fixed dates and identities, LC_ALL=C, TZ=UTC.
#
# A separate probe run per program sets MYALLOC_CONF to an option myalloc
# does not know; every process that loaded myalloc then prints a line
# starting "<myalloc>: " on stderr. No such line means LD_PRELOAD did not
# take effect, and the program FAILs even if its outputs matched.
#
# One line per program: PASS, FAIL (with a short diff) or SKIP (with the
# reason: a program that is not installed is never counted as passed).
# This script never installs anything (tools/ci-deps.sh does, for CI).
#
# usage: tools/check-real.sh [PROGRAM...]
#   programs: python3 sqlite3 git gcc g++ sort make mt_program (default: all)
# environment:
#   CHECK_REAL_TIMEOUT   seconds one step may take before it is killed (300)
#   CHECK_REAL_KEEP=1    keep the work directory (its path is printed)
#   CHECK_REAL_BREAK="NAME..."  self-test: alter a line of these programs'
#                        myalloc output before the comparison, so that they
#                        must be reported as FAIL ("all" for every program)
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$ROOT/lib/libmyalloc.so
REAL=$ROOT/test/real
TIMEOUT=${CHECK_REAL_TIMEOUT:-300}
ALL_PROGRAMS="python3 sqlite3 git gcc g++ sort make mt_program"
PROBE_OPT=check_real_probe

if [ ! -f "$LIB" ]; then
    echo "check-real: $LIB is missing (run make first)" >&2
    exit 2
fi
for tool in mktemp timeout diff cmp sed sort md5sum; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "check-real: the script itself needs '$tool' (coreutils/diffutils)" >&2
        exit 2
    fi
done

# Nothing from the caller's environment may change the runs.
unset LD_PRELOAD LD_LIBRARY_PATH MYALLOC_CONF MALLOC_CONF GLIBC_TUNABLES
unset MAKEFLAGS MFLAGS MAKELEVEL GIT_DIR GIT_WORK_TREE PYTHONPATH PYTHONSTARTUP
export LC_ALL=C TZ=UTC

WORK=$(mktemp -d "${TMPDIR:-/tmp}/check-real.XXXXXX") || exit 2
cleanup() {
    if [ "${CHECK_REAL_KEEP:-0}" = 1 ]; then
        echo "check-real: work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
mkdir -p "$WORK/out" "$WORK/shared" "$WORK/lib"

# Preload a private copy of the library: make rewrites lib/libmyalloc.so in
# place (cp), and a build running meanwhile in the same tree would change
# the pages under the running programs (SIGBUS, SIGSEGV) or switch versions
# between the runs that are compared.
BUILT=$LIB
LIB=$WORK/lib/libmyalloc.so
cp "$BUILT" "$LIB" || exit 2

npass=0 nskip=0 nfail=0

pass() { npass=$((npass + 1)); printf 'PASS  %-10s %s\n' "$1" "$2"; }
skip() { nskip=$((nskip + 1)); printf 'SKIP  %-10s %s\n' "$1" "$2"; }
fail() {
    nfail=$((nfail + 1))
    printf 'FAIL  %-10s %s\n' "$1" "$2"
    if [ -n "${3:-}" ]; then
        printf '%s\n' "$3" | sed 's/^/        | /'
    fi
}

# ---------------------------------------------------------------------------
# Running programs

SIDE=sys

# under CMD...: run the program under test, on myalloc when SIDE=my.
under() {
    if [ "$SIDE" = my ]; then
        timeout -k 10 "$TIMEOUT" env LD_PRELOAD="$LIB" "$@"
    else
        timeout -k 10 "$TIMEOUT" "$@"
    fi
}

# step LABEL CMD...: one step of a scenario; its output and exit status go
# into the compared output.
step() {
    local label=$1
    shift
    echo "== $label"
    under "$@"
    echo "== $label: exit $?"
}

# step_to FILE LABEL CMD...: the same, with CMD's stdout and stderr in FILE.
step_to() {
    local file=$1 label=$2
    shift 2
    echo "== $label"
    under "$@" >"$file" 2>&1
    echo "== $label: exit $?"
}

# run_side NAME SIDE: run scen_NAME in a fresh directory; the normalized
# output lands in $WORK/out/NAME.SIDE.
run_side() {
    local name=$1 d raw
    SIDE=$2
    d=$(mktemp -d "$WORK/$name.$SIDE.XXXXXX") || return 1
    raw=$WORK/out/$name.$SIDE.raw
    (cd "$d" && "scen_$name") >"$raw" 2>&1 </dev/null
    echo "== scenario exit $?" >>"$raw"
    # Temp paths differ between the two runs (and from machine to machine).
    sed -e "s|$d|<TMP>|g" -e "s|$WORK|<WORK>|g" "$raw" >"$WORK/out/$name.$SIDE"
    rm -rf "$d"
    SIDE=sys
}

# probe NAME CMD...: run CMD on myalloc with an unknown MYALLOC_CONF option
# and print how many processes said so (each process that loaded myalloc
# and allocated prints one "<myalloc>: " warning about it).
probe() {
    local d n
    d=$(mktemp -d "$WORK/probe.XXXXXX") || { echo 0; return; }
    shift
    (cd "$d" && MYALLOC_CONF="$PROBE_OPT:1" timeout -k 10 "$TIMEOUT" \
        env LD_PRELOAD="$LIB" "$@") >"$d.out" 2>"$d.err" </dev/null
    n=$(grep -c "^<myalloc>: .*$PROBE_OPT" "$d.err")
    rm -rf "$d" "$d.out" "$d.err"
    echo "${n:-0}"
}

# compare NAME DETAIL MIN_PROBE PROBE_CMD...: run both sides of scen_NAME,
# the probe, and report.
compare() {
    local name=$1 detail=$2 min=$3 start=$SECONDS n sys my bad show
    shift 3
    show=$name
    [ "$name" = gxx ] && show=g++
    run_side "$name" sys
    run_side "$name" my
    sys=$WORK/out/$name.sys
    my=$WORK/out/$name.my
    case " ${CHECK_REAL_BREAK:-} " in
    *" $show "* | *" all "*)
        # Self-test of the comparison: alter one line of myalloc's output.
        sed -i '2s/$/ (deliberately altered by CHECK_REAL_BREAK)/' "$my"
        ;;
    esac
    n=$(probe "$name" "$@")
    detail="$detail; $((SECONDS - start))s"
    # A scenario that fails on the system malloc proves nothing.
    bad=$(grep -E '^== .*: exit [1-9][0-9]*$|^== scenario exit [1-9]' "$sys" | head -5)
    if [ -n "$bad" ]; then
        fail "$show" "scenario is broken on the system malloc ($detail)" "$bad"
    elif ! cmp -s "$sys" "$my"; then
        fail "$show" "output differs from the system malloc's ($detail)" \
            "$(diff -u --label sys --label myalloc "$sys" "$my" | sed -n '3,22p')"
    elif [ "$n" -lt "$min" ]; then
        fail "$show" "myalloc not in use: the probe saw $n process(es) on myalloc, expected >= $min ($detail)"
    else
        pass "$show" "($detail; probe: $n process(es) on myalloc)"
    fi
}

have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------------------
# python3: a chunk of its own test suite (regrtest, 2 workers).

PY_TESTS="test_json test_re test_collections test_heapq test_bisect test_string
test_list test_dict test_set test_unicode test_sort test_deque test_functools
test_struct test_bytes test_tuple test_long test_float test_textwrap
test_difflib test_itertools test_fstring test_pickle test_decimal"
PY=

# Prefer Debian's /usr/bin/python3, then any python3 on PATH; the first whose
# test package has every test module wins. Sets PY (the real executable, not
# a shim) or prints why not.
pick_python() {
    local cand real
    for cand in /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
        if [ -z "$cand" ] || [ ! -x "$cand" ]; then
            continue
        fi
        # shellcheck disable=SC2086
        real=$("$cand" - $PY_TESTS <<'EOF' 2>/dev/null
import importlib.util, sys
import test.support, test.libregrtest
missing = [m for m in sys.argv[1:] if importlib.util.find_spec("test." + m) is None]
if not missing:
    print(sys.executable)
EOF
        )
        if [ -n "$real" ] && [ -x "$real" ]; then
            PY=$real
            return 0
        fi
    done
    return 1
}

scen_python3() {
    # Workers' temp dirs land here; bytecode is never written to the
    # system's directories.
    # shellcheck disable=SC2086
    TMPDIR=$PWD PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 \
        step_to regrtest.log "regrtest" "$PY" -m test -j2 -v --timeout "$TIMEOUT" $PY_TESTS
    # Per test case outcomes, in a fixed order (workers finish in any order).
    grep -E ' \.\.\. (ok|skipped.*|FAIL|ERROR|expected failure|unexpected success)$' regrtest.log | sort
    grep -E '^Ran [0-9]+ tests? in ' regrtest.log | sed 's/ in .*//' | sort | uniq -c
    grep -E '^(OK|FAILED)( \(.*\))?$' regrtest.log | sort | uniq -c
    # regrtest's final summary (without the duration).
    sed -n '/^== Tests result/,$p' regrtest.log | grep -v '^Total duration'
}

# ---------------------------------------------------------------------------
# sqlite3: a scripted load, then integrity checks.

scen_sqlite3() {
    cat >load.sql <<'EOF'
.bail on
.headers on
PRAGMA page_size = 4096;
PRAGMA cache_size = -4000;
PRAGMA foreign_keys = ON;
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, score REAL);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id) ON DELETE CASCADE,
                    amount INTEGER, note TEXT, created TEXT);
CREATE TABLE tags(order_id INTEGER, tag TEXT, PRIMARY KEY(order_id, tag)) WITHOUT ROWID;
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
INSERT INTO customers SELECT x, 'cust' || printf('%06d', (x * 7919) % 20011), 'city' || (x % 97),
                             ((x * 2654435761) % 100000) / 1000.0 FROM c;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO orders SELECT x, 1 + (x * 48271) % 20000, (x * 16807) % 10007,
                          substr(printf('%x-%x-%x-%x', x * 31, x * 1009, x * 7, x * x), 1, 1 + x % 40),
                          date('2020-01-01', '+' || (x % 1500) || ' days') FROM c;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 60000)
INSERT INTO tags SELECT 1 + (x * 13) % 200000, 'tag' || (x % 37) FROM c WHERE true
  ON CONFLICT DO NOTHING;
COMMIT;
CREATE INDEX orders_customer ON orders(customer_id);
CREATE INDEX orders_amount ON orders(amount, created);
CREATE UNIQUE INDEX customers_name ON customers(name, id);
CREATE INDEX orders_note ON orders(note COLLATE NOCASE);
SELECT count(*), sum(amount), min(created), max(created), sum(length(note)) FROM orders;
UPDATE orders SET amount = amount * 2, note = note || '-updated' WHERE amount % 5 = 0;
DELETE FROM orders WHERE id % 7 = 3;
UPDATE customers SET score = score + 1.5 WHERE city IN ('city1', 'city2', 'city3');
DELETE FROM customers WHERE id % 101 = 0;
SELECT changes() AS deleted_customers;
SELECT c.city, count(o.id) AS n, sum(o.amount) AS total, round(avg(c.score), 4) AS avg_score
  FROM customers c JOIN orders o ON o.customer_id = c.id
  GROUP BY c.city ORDER BY total DESC, c.city LIMIT 12;
SELECT count(*) AS orphans FROM orders o LEFT JOIN customers c ON c.id = o.customer_id WHERE c.id IS NULL;
SELECT t.tag, count(*) AS n, sum(o.amount) AS total FROM tags t JOIN orders o ON o.id = t.order_id
  GROUP BY t.tag HAVING n > 1000 ORDER BY t.tag;
SELECT customer_id, id, amount, rank() OVER (PARTITION BY customer_id ORDER BY amount DESC, id) AS r
  FROM orders WHERE customer_id BETWEEN 10 AND 12 ORDER BY customer_id, r LIMIT 15;
SELECT substr(created, 1, 4) AS year, count(*), sum(amount),
       length(group_concat(note, ',')) AS notes_len FROM orders GROUP BY year ORDER BY year;
SELECT id, note FROM orders ORDER BY note COLLATE NOCASE, id LIMIT 5 OFFSET 100000;
SELECT json_object('n', count(*), 'top', json_group_array(id)) FROM
  (SELECT id FROM orders ORDER BY amount DESC, id LIMIT 8);
SELECT count(DISTINCT note), count(DISTINCT customer_id), max(length(note)) FROM orders;
VACUUM;
PRAGMA integrity_check;
PRAGMA foreign_key_check;
SELECT count(*) FROM orders;
SELECT count(*) FROM customers;
EOF
    step "load" sqlite3 data.db <load.sql
    # Reopen the database in a new process and check it again.
    step "reopen" sqlite3 data.db 'PRAGMA integrity_check; PRAGMA quick_check;
        SELECT count(*), sum(amount), total(length(note)) FROM orders;'
    step_to dump.sql "dump" sqlite3 data.db .dump
    echo "dump: $(wc -l <dump.sql) lines, md5 $(md5sum <dump.sql)"
    # Load the dump into a fresh database, which must hold the same rows.
    step "restore" sqlite3 copy.db <dump.sql
    md5sum data.db
    step "copy" sqlite3 copy.db 'PRAGMA integrity_check;
        SELECT count(*), sum(amount), total(length(note)) FROM orders;'
}

# ---------------------------------------------------------------------------
# git: commits with fixed dates and identities, clone --no-local, log, gc, fsck.

scen_git() {
    export HOME=$PWD GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0
    unset GIT_CONFIG_GLOBAL GIT_EDITOR GIT_PAGER
    # pack.threads=1: delta search is deterministic, so are the packs.
    cat >.gitconfig <<'EOF'
[user]
	name = Check Real
	email = check-real@example.invalid
[init]
	defaultBranch = main
[pack]
	threads = 1
[gc]
	auto = 0
[core]
	pager = cat
[advice]
	detachedHead = false
EOF
    export GIT_AUTHOR_NAME="Ada Author" GIT_AUTHOR_EMAIL=ada@example.invalid
    export GIT_COMMITTER_NAME="Cy Committer" GIT_COMMITTER_EMAIL=cy@example.invalid
    local i t=1700000000 f
    step "init" git init -q src
    cd src || return 1
    for i in $(seq 1 60); do
        t=$((t + 3600))
        export GIT_AUTHOR_DATE="@$t +0000" GIT_COMMITTER_DATE="@$((t + 60)) +0000"
        # Commits 31..45 are on a topic branch, in a directory of its own
        # (the merge must not conflict); main renames and removes files.
        if [ "$i" -gt 30 ] && [ "$i" -le 45 ]; then
            f=topic/file$((i % 5)).txt
        else
            f=dir$((i % 4))/file$((i % 9)).txt
        fi
        mkdir -p "$(dirname "$f")"
        awk -v i="$i" 'BEGIN { for (k = 1; k <= 40 + i * 3; k++)
            printf "line %d of commit %d: %08x\n", k, i, (k * 2654435761 + i * 40503) % 4294967296 }' >>"$f"
        if [ $((i % 10)) = 0 ] && [ "${f%%/*}" != topic ]; then
            under git mv -k "dir$((i % 4))/file$(((i + 1) % 9)).txt" "dir$((i % 4))/moved$i.txt"
        fi
        if [ $((i % 13)) = 0 ] && [ "${f%%/*}" != topic ]; then
            under git rm -q -r --ignore-unmatch "dir$(((i + 2) % 4))"
        fi
        under git add -A
        under git commit -q -m "commit $i: change $f" -m "Body of commit $i." || echo "commit $i failed"
        if [ "$i" = 30 ]; then
            under git tag -a v1.0 -m "release 1.0"
            under git checkout -q -b topic
        fi
        if [ "$i" = 45 ]; then
            under git checkout -q main
        fi
    done
    export GIT_AUTHOR_DATE="@$((t + 7200)) +0000" GIT_COMMITTER_DATE="@$((t + 7200)) +0000"
    step "merge" git merge -q --no-ff -m "merge topic" topic
    cd .. || return 1
    step "clone" git clone --no-local src clone
    cd clone || return 1
    step "branches" git branch -a
    step "log" git log --all --graph --stat --format=fuller
    step "log-patch" git log -p --all --format='%H %P %an %cd' --date=iso
    step "tags" git show --stat v1.0
    step "blame" git blame -s dir1/file1.txt
    step "diff" git diff --stat v1.0 HEAD
    step "rev-list" git rev-list --all --objects
    step "gc" git gc -q --prune=now
    step "count-objects" git count-objects -v
    step "verify-pack" git verify-pack -s .git/objects/pack/pack-*.idx
    step "fsck" git fsck --full --strict --no-progress
    step "archive" git archive --format=tar -o ../head.tar HEAD
    md5sum ../head.tar | sed 's| .*||'
    cd ..
    step "fsck-src" git -C src fsck --full --no-progress
}

# ---------------------------------------------------------------------------
# gcc / g++: compile, link, run. The objects must be identical.

scen_gcc() {
    cp "$REAL/gcc_input.c" .
    step "compile" gcc -O2 -g -Wall -Wextra -fdebug-prefix-map="$PWD"=. \
        -frandom-seed=check-real -c gcc_input.c -o gcc_input.o
    step "compile-O3" gcc -O3 -march=x86-64-v2 -funroll-loops -Wall -Wextra \
        -frandom-seed=check-real -S gcc_input.c -o gcc_input.s
    step "preprocess" gcc -E -P gcc_input.c -o gcc_input.i
    step "link" gcc -o gcc_input gcc_input.o
    md5sum gcc_input.o gcc_input.s gcc_input.i gcc_input
    step "run" ./gcc_input
}

scen_gxx() {
    cp "$REAL/mt_program.cpp" .
    step "compile" g++ -std=c++17 -O2 -g -pthread -Wall -Wextra -fdebug-prefix-map="$PWD"=. \
        -frandom-seed=check-real -c mt_program.cpp -o mt_program.o
    step "link" g++ -pthread -o mt_program mt_program.o
    md5sum mt_program.o mt_program
    step "run" ./mt_program
}

# ---------------------------------------------------------------------------
# sort: a large generated file (2 million lines, ~30 MB).

scen_sort() {
    local in=$WORK/shared/sort.in
    step "sort" sort -o plain.out "$in"
    step "sort-n" sort -n -o numeric.out "$in"
    step "sort-k2-r" sort -t ' ' -k2,2r -o key2.out "$in"
    # Small buffer: temp files in this directory and a multi-way merge.
    step "sort-external" sort -n -s -k1,1 -S 4M -T . --parallel=2 -o external.out "$in"
    step "sort-unique" sort -u -n -k1,1 -o unique.out "$in"
    step "check" sort -c -n numeric.out
    wc -l <unique.out
    md5sum plain.out numeric.out key2.out external.out unique.out
}

make_sort_input() {
    [ -f "$WORK/shared/sort.in" ] && return 0
    awk 'BEGIN { for (i = 1; i <= 2000000; i++) {
        h = (i * 2654435761) % 4294967296
        printf "%d %08x\n", h % 1000003, h } }' >"$WORK/shared/sort.in"
}

# ---------------------------------------------------------------------------
# make -j2: ~50 generated C files, a recursive make for a static library.

scen_make() {
    local i
    mkdir -p src lib
    for i in $(seq -w 1 50); do
        cat >"src/f$i.c" <<EOF
#include "funcs.h"
int f$i(int x)
{
    int s = 0;
    for (int k = 0; k < x; k++)
        s += (k * 1$i) % (37 + x) ^ helper(k + 1$i);
    return s;
}
EOF
    done
    for i in $(seq -w 1 10); do
        printf 'int helper%s(int x) { return x * %d + %d; }\n' "$i" "$((10#$i))" "$((10#$i * 7))" >"lib/h$i.c"
    done
    cat >lib/helper.c <<'EOF'
int helper01(int), helper02(int), helper03(int), helper04(int), helper05(int);
int helper06(int), helper07(int), helper08(int), helper09(int), helper10(int);
int helper(int x)
{
    int (*fns[])(int) = {helper01, helper02, helper03, helper04, helper05,
                         helper06, helper07, helper08, helper09, helper10};
    return fns[x % 10](x) & 0xff;
}
EOF
    cat >lib/Makefile <<'EOF'
OBJS := $(patsubst %.c,%.o,$(sort $(wildcard *.c)))
libhelp.a: $(OBJS)
	$(AR) rcs $@ $^
%.o: %.c
	$(CC) -O1 -c -o $@ $<
EOF
    cat >Makefile <<'EOF'
CC ?= cc
SRCS := $(sort $(wildcard src/f*.c))
OBJS := $(patsubst src/%.c,obj/%.o,$(SRCS))
NAMES := $(patsubst src/%.c,%,$(SRCS))

all: prog

# A rule per object, made with eval (exercises make's own allocations).
define OBJ_RULE
obj/$(1).o: src/$(1).c funcs.h | obj
	$$(CC) -O1 -Wall -I. -c -o $$@ $$<
endef
$(foreach n,$(NAMES),$(eval $(call OBJ_RULE,$(n))))

obj:
	mkdir -p obj

funcs.h: Makefile
	{ echo 'int helper(int);'; for n in $(NAMES); do echo "int $$n(int);"; done; } > $@

main.c: funcs.h
	{ printf '#include <stdio.h>\n#include "funcs.h"\nint main(void)\n{\n    long t = 0;\n'; \
	  for n in $(NAMES); do printf '    t += %s(100);\n    printf("%%s %%d\\n", "%s", %s(100));\n' $$n $$n $$n; done; \
	  printf '    printf("total %%ld\\n", t);\n    return 0;\n}\n'; } > $@

obj/main.o: main.c | obj
	$(CC) -O1 -I. -c -o $@ $<

lib/libhelp.a: FORCE
	$(MAKE) -C lib

prog: $(OBJS) obj/main.o lib/libhelp.a
	$(CC) -o $@ $(OBJS) obj/main.o lib/libhelp.a

FORCE:
.PHONY: all FORCE
EOF
    # -j2 runs jobs in any order: the log is compared sorted.
    step_to build.log "build" make -j2
    sort build.log
    step "run" ./prog
    step_to again.log "rebuild-nothing" make -j2
    sort again.log
    # f07.o older than its source: one compile and the link.
    touch -d '-1 hour' obj/f07.o
    step_to one.log "rebuild-one" make -j2
    sort one.log
    step "run-again" ./prog
    md5sum prog obj/*.o lib/libhelp.a | md5sum
}

# ---------------------------------------------------------------------------
# mt_program: our multi-threaded C++ program (test/real/mt_program.cpp),
# built once here with the system's g++, run on each side.

MT_BIN=$WORK/shared/mt_program
scen_mt_program() {
    step "default" "$MT_BIN" 1
    # myalloc's options (ignored by the system malloc): other code paths.
    MYALLOC_CONF=tcache:false step "no-tcache" "$MT_BIN" 1
    MYALLOC_CONF=narenas:1 step "one-arena" "$MT_BIN" 1
}

# ---------------------------------------------------------------------------

echo "check-real: $BUILT (preloaded from a copy; md5 $(md5sum <"$LIB" | cut -d' ' -f1))"
if [ "$(LD_PRELOAD=$LIB sh -c 'grep -c libmyalloc /proc/$$/maps' 2>/dev/null)" -gt 0 ] 2>/dev/null; then
    echo "check-real: LD_PRELOAD=<copy>/libmyalloc.so maps into a shell: ok"
else
    echo "check-real: LD_PRELOAD=<copy>/libmyalloc.so does not map into a shell (every probe will fail)"
fi

programs=${*:-$ALL_PROGRAMS}
for prog in $programs; do
    case $prog in
    python3)
        if ! have python3 && [ ! -x /usr/bin/python3 ]; then
            skip python3 "python3 not installed"
        elif ! pick_python; then
            pkg=libpython3-testsuite
            if [ -x /usr/bin/python3 ]; then
                pkg="libpython$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')-testsuite"
            fi
            skip python3 "python3 test package not installed (apt-get install $pkg)"
        else
            # shellcheck disable=SC2086
            compare python3 "$PY $("$PY" -c 'import platform; print(platform.python_version())'), $(set -- $PY_TESTS; echo $#) test files" 2 \
                "$PY" -c 'import subprocess, sys; subprocess.run([sys.executable, "-c", "pass"], check=True)'
        fi
        ;;
    sqlite3)
        if ! have sqlite3; then
            skip sqlite3 "sqlite3 not installed"
        else
            compare sqlite3 "sqlite $(sqlite3 -version | cut -d' ' -f1), 200k rows" 1 sqlite3 :memory: 'SELECT 1;'
        fi
        ;;
    git)
        if ! have git; then
            skip git "git not installed"
        else
            compare git "$(git --version), 61 commits" 1 git init -q probe-repo
        fi
        ;;
    gcc)
        if ! have gcc; then
            skip gcc "gcc not installed"
        else
            # gcc, cc1 and as each load myalloc.
            printf 'int main(void) { return 0; }\n' >"$WORK/shared/probe.c"
            compare gcc "gcc $(gcc -dumpfullversion)" 3 gcc -c "$WORK/shared/probe.c" -o /dev/null
        fi
        ;;
    g++)
        if ! have g++; then
            skip g++ "g++ not installed"
        else
            printf 'int main() { return 0; }\n' >"$WORK/shared/probe.cpp"
            # (the scenario's functions are named gxx; reported as g++)
            compare gxx "g++ $(g++ -dumpfullversion), test/real/mt_program.cpp" 3 \
                g++ -c "$WORK/shared/probe.cpp" -o /dev/null
        fi
        ;;
    sort)
        if ! have sort || ! have awk; then
            skip sort "sort or awk not installed"
        else
            make_sort_input
            seq 1000 >"$WORK/shared/probe.txt"
            compare sort "$(sort --version | head -1), $(wc -l <"$WORK/shared/sort.in") lines" 1 \
                sort -n "$WORK/shared/probe.txt" -o /dev/null
        fi
        ;;
    make)
        if ! have make; then
            skip make "make not installed"
        elif ! have cc; then
            skip make "no C compiler (cc) for the make scenario"
        else
            printf 'all:\n\t@cc -c -x c /dev/null -o /dev/null\n' >"$WORK/shared/probe.mk"
            compare make "$(make --version | head -1), -j2, 51 objects" 3 make -f "$WORK/shared/probe.mk"
        fi
        ;;
    mt_program)
        if ! have g++; then
            skip mt_program "g++ not installed (needed to build test/real/mt_program.cpp)"
        elif ! g++ -std=c++17 -O2 -pthread -o "$MT_BIN" "$REAL/mt_program.cpp" >"$WORK/shared/mt.log" 2>&1; then
            fail mt_program "test/real/mt_program.cpp does not build" "$(head -20 "$WORK/shared/mt.log")"
        else
            compare mt_program "4 phases; default, tcache:false, narenas:1" 1 "$MT_BIN" 1
        fi
        ;;
    *)
        echo "check-real: unknown program '$prog' (known: $ALL_PROGRAMS)" >&2
        exit 2
        ;;
    esac
done

echo "check-real: $npass passed, $nfail failed, $nskip skipped"
[ "$nfail" -eq 0 ]
