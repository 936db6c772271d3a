#!/bin/sh
# make run: build the demo, linked with -lmyalloc, and run it with
# profiling on (MYALLOC_CONF=prof:true).
set -e
cd "$(dirname "$0")/.."
mkdir -p build/demo
cc -O1 -g -fno-omit-frame-pointer -rdynamic -Iinclude -o build/demo/demo examples/demo.c \
    -Llib -lmyalloc -Wl,-rpath,'$ORIGIN/../../lib' -lm
cd build/demo
echo "running: MYALLOC_CONF=prof:true,lg_prof_sample:16 build/demo/demo   (linked with -lmyalloc)"
echo
MYALLOC_CONF=prof:true,lg_prof_sample:16 ./demo demo.heap
