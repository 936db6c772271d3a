# myalloc build.
#
#   make                 lib/libmyalloc.so and lib/libmyalloc.a (-O2)
#   make run             the demo: a program profiled on myalloc, its sites next to the truth
#   make test            the whole test suite (what CI runs)
#   make check-real      real programs under LD_PRELOAD, compared with the system malloc
#   make check-redis     redis-server (a jemalloc client) on myalloc: benchmark, INFO, MEMORY
#   make bench           speed and memory against glibc, jemalloc, tcmalloc, mimalloc
#   make bench-instr     callgrind instruction counts per malloc+free pair
#   make bench-prof      the heap profiler's cost: overhead, cost per sample, memory per sample
#   make bench-footprint memory kept (RSS) against the same peers: fragmentation, load peaks, threads
#   make fuzz            libFuzzer targets for the option and mallctl-name parsers
#   make check-ubsan     the unit tests on a library built with UndefinedBehaviorSanitizer
#
# Compile-time configuration (each combination builds in its own directory):
#   make LG_PAGE=16 LG_QUANTUM=4 LG_NGROUP=2

LG_PAGE    ?= 12
LG_QUANTUM ?= 4
LG_NGROUP  ?= 2

CC      ?= cc
OPT     ?= -O2
CONFIG  := p$(LG_PAGE)-q$(LG_QUANTUM)-g$(LG_NGROUP)
# SANITIZE=undefined: the library, the tests and the tools built with
# UndefinedBehaviorSanitizer, in a directory of their own; any report aborts
# the process (make check-ubsan).
SANITIZE ?=
ifeq ($(SANITIZE),undefined)
CONFIG   := $(CONFIG)-ubsan
SANFLAGS := -fsanitize=undefined -fno-sanitize-recover=undefined
else ifneq ($(SANITIZE),)
$(error SANITIZE=$(SANITIZE): only SANITIZE=undefined is supported)
endif
BUILD   := build/$(CONFIG)
LIBDIR  := lib

WARN    := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
BASEFLAGS := -std=gnu11 -g $(WARN) -pthread -D_GNU_SOURCE
# Hidden by default: only MA_EXPORT symbols leave the library. Initial-exec
# TLS keeps the thread state one %fs-relative access away. Frame pointers
# (except in leaf functions: the fast paths stay frameless) keep the
# profiler's frame-pointer unwinder (prof_bt:fp) able to walk out of the
# allocator. The builtins are off so the compiler never turns our own code
# into calls to malloc.
LIBFLAGS  := $(OPT) -fPIC -fvisibility=hidden -ftls-model=initial-exec \
             -fno-omit-frame-pointer -momit-leaf-frame-pointer \
             -fno-semantic-interposition -fno-plt \
             -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free \
             -I$(BUILD) -Iinclude $(SANFLAGS)
LDLIBS    := -pthread         # the library: libc and pthreads only (no libm, see src/common/math.c)
# Relative relocations packed (DT_RELR, glibc 2.36 and binutils 2.38 on):
# the option and mallctl tables' 364 pointers took 8.7 KiB of .rela.dyn,
# which the loader reads at every start; packed they take 112 bytes, and
# the library's first mapping is 2 pages instead of 4. Left out where the
# linker or the C library lacks it (the probe fails on any warning).
RELRFLAGS := $(shell printf 'int f(void){return 0;}\n' | $(CC) -shared -fPIC -x c - -o /dev/null \
                 -Wl,-z,pack-relative-relocs -Wl,--fatal-warnings 2>/dev/null && echo -Wl,-z,pack-relative-relocs)
PROGLIBS  := -lm -pthread     # test and tool programs

SRC := $(filter-out src/sizeclass/sc_gen.c,$(wildcard src/*/*.c))
# The code of the cold files (what only profiling, mallctl and reports
# run) goes into a mapping of its own, and so do their read-only data with
# the unwind tables (.eh_frame, read only to unwind our own frames: by the
# profiler), each past a one-page hole ($(BUILD)/cold.ld). A page fault
# maps the pages around the one faulted (64 KiB, and more with the large
# folios of recent kernels: here one fault at the start of the text mapped
# the 112 KiB up to a 128 KiB boundary), so an order within one mapping
# does not keep code out of memory; a mapping of its own does. Our
# library's pages resident in a program that does not profile: 184 -> 96
# KiB (text 112 -> 52, read-only data and unwind tables 44 -> 16);
# test_linking checks the layout, and that a program that only allocates
# maps none of the cold code. Functions of cold files that every program
# runs are MA_HOT_TEXT; their .text.unlikely (startup code, MA_COLD) stays
# with the rest as well.
COLD_SRC := src/prof/prof.c $(wildcard src/prof/prof_*.c) src/core/ctl.c src/core/stats.c \
            src/core/stats_print.c src/common/fmt.c src/common/math.c
# The warm code: what a program reaches only through the interfaces beyond
# malloc, free, calloc and realloc (jemalloc's *allocx, aligned and sized
# allocation, malloc_usable_size, the mallinfo family), through realloc's
# resizing of a large object in place, through options (their parsing, the
# background thread, profiling's per-allocation paths, THP and lazy
# purging), fork, the controls mallctl drives, or a fatal error. The warm
# files' .text and .rodata, the functions of other files marked
# MA_WARM_TEXT and the data marked MA_WARM_RODATA get a mapping of their
# own between the code and the cold code: a program that does without all
# of these maps none of it (every bench program: code 14 -> 10 pages,
# .rodata 4 -> 3), and one that uses them maps its 5 pages on top, as many
# as it had before.
WARM_SRC := src/core/jemalloc.c src/core/glibc.c src/core/background.c src/core/conf.c
SRC := $(filter-out $(COLD_SRC) $(WARM_SRC),$(SRC)) $(WARM_SRC) $(COLD_SRC)
OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRC))
COLD_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(COLD_SRC))
WARM_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(WARM_SRC))
DEP := $(OBJ:.o=.d)

.PHONY: all lib test unit unit-config config-lib criterion check-real check-ubsan run bench bench-instr fuzz clean install
all: lib

lib: $(LIBDIR)/libmyalloc.so $(LIBDIR)/libmyalloc.a

$(BUILD)/sc_gen: src/sizeclass/sc_gen.c
	@mkdir -p $(@D)
	$(CC) -O1 -o $@ $<

$(BUILD)/sc_tables.h: $(BUILD)/sc_gen
	$(BUILD)/sc_gen $(LG_PAGE) $(LG_QUANTUM) $(LG_NGROUP) > $@.tmp && mv $@.tmp $@

# Objects depend on the Makefile too: a change of flags rebuilds them.
$(BUILD)/obj/%.o: src/%.c $(BUILD)/sc_tables.h Makefile
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) $(LIBFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

# After .rodata: [code][.rodata][hole][warm code, warm .rodata][hole]
# [cold code][hole][cold .rodata][.eh_frame...]. ld starts a new segment
# where a section lies a page or more past the end of the last one, and the
# loader maps the gap PROT_NONE. Of the warm files' read-only data only
# .rodata, .rodata.str* and .rodata.cst* move: MA_HOT_RODATA's .rodata.hot
# stays. Made again with any cold object, so that a file added to COLD_SRC
# by its wildcard is in it.
$(BUILD)/cold.ld: Makefile $(COLD_OBJ)
	@mkdir -p $(@D)
	printf '%s\n' 'SECTIONS {' \
	    '  .text.warm (ALIGN(CONSTANT(MAXPAGESIZE)) + CONSTANT(MAXPAGESIZE)) : {' \
	    '    *(.text.warm)' $(foreach o,$(WARM_OBJ),'    $(o)(.text)') \
	    '    *(.rodata.warm)' $(foreach o,$(WARM_OBJ),'    $(o)(.rodata .rodata.str* .rodata.cst*)') '  }' \
	    '  .text.cold (ALIGN(CONSTANT(MAXPAGESIZE)) + CONSTANT(MAXPAGESIZE)) : {' \
	    $(foreach o,$(COLD_OBJ),'    $(o)(.text)') '  }' \
	    '  . = ALIGN(CONSTANT(MAXPAGESIZE)) + CONSTANT(MAXPAGESIZE);' \
	    '  .rodata.cold : {' $(foreach o,$(COLD_OBJ),'    $(o)(.rodata .rodata.*)') '  }' '}' \
	    'INSERT AFTER .rodata;' > $@

$(BUILD)/libmyalloc.so: $(OBJ) $(BUILD)/cold.ld
	$(CC) -shared -o $@ $(OBJ) $(SANFLAGS) $(LDFLAGS) $(LDLIBS) -Wl,-soname,libmyalloc.so -Wl,-z,now \
	    $(RELRFLAGS) -Wl,-T,$(BUILD)/cold.ld

$(BUILD)/libmyalloc.a: $(OBJ)
	rm -f $@
	ar rcs $@ $(OBJ)

# lib/ holds the configuration of the last `make lib` (or `make`): copied
# whenever it differs, since switching back to a configuration built earlier
# leaves its build older than lib/.
$(LIBDIR)/libmyalloc.so: $(BUILD)/libmyalloc.so FORCE
	@mkdir -p $(LIBDIR)
	@cmp -s $< $@ || cp $< $@
$(LIBDIR)/libmyalloc.a: $(BUILD)/libmyalloc.a FORCE
	@mkdir -p $(LIBDIR)
	@cmp -s $< $@ || cp $< $@

.PHONY: FORCE
FORCE:

-include $(DEP)

# ---------------------------------------------------------------------------
# Tests

TEST_SRC   := $(wildcard test/test_*.c)
TEST_BIN   := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_SRC))
TEST_CFLAGS := $(BASEFLAGS) $(SANFLAGS) -O1 -I$(BUILD) -Iinclude -Isrc -fno-builtin \
               -Wno-use-after-free -Wno-alloc-size-larger-than -Wno-free-nonheap-object
HELPER_SRC := $(wildcard test/helpers/*.c)
HELPER_BIN := $(patsubst test/helpers/%.c,$(BUILD)/helpers/%,$(HELPER_SRC))

$(BUILD)/test/%: test/%.c $(wildcard test/*.h) $(BUILD)/libmyalloc.a
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -rdynamic -o $@ $< $(BUILD)/libmyalloc.a -lcriterion $(PROGLIBS)

# Helper programs run as subprocesses by the tests (plain binaries: they get
# myalloc through LD_PRELOAD or by linking, as each test says).
$(BUILD)/helpers/%: test/helpers/%.c
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) -O1 -Iinclude -o $@ $< $(PROGLIBS)

criterion:
	@tools/ensure-criterion.sh

# This configuration's libraries without touching lib/ (used for the other
# configurations the tests build).
config-lib: $(BUILD)/libmyalloc.so $(BUILD)/libmyalloc.a

# The tests of one configuration.
unit-config: criterion config-lib $(TEST_BIN) $(HELPER_BIN)
	@MYALLOC_TEST_SANITIZE=$(SANITIZE) tools/run-tests.sh $(BUILD) $(TEST_BIN)

# A second configuration (64 KiB pages, 32-byte quantum, 8 classes per
# doubling) runs the whole unit suite too; a 2 KiB-page build must refuse
# to start on this 4 KiB-page machine (test_config checks the message).
ALT_CONFIG := LG_PAGE=16 LG_QUANTUM=5 LG_NGROUP=3
.PHONY: p11-lib
p11-lib:
	@$(MAKE) --no-print-directory LG_PAGE=11 config-lib >/dev/null
unit: criterion lib p11-lib
	@$(MAKE) --no-print-directory unit-config
	@echo "== again with $(ALT_CONFIG)"
	@$(MAKE) --no-print-directory $(ALT_CONFIG) unit-config

# The unit tests once more, the library built with UBSan: undefined
# behaviour anywhere they reach aborts, and the test fails. The plain
# 2 KiB-page build is the one test_config expects to refuse to start.
check-ubsan: criterion p11-lib
	@$(MAKE) --no-print-directory SANITIZE=undefined unit-config

test: unit check-ubsan check-real check-redis

check-real: lib
	@tools/check-real.sh

.PHONY: check-redis
check-redis: lib
	@tools/check-redis.sh

bench: lib
	@bench/run.sh

bench-instr: lib
	@bench/instr.sh

bench-prof: lib
	@bench/prof.sh

.PHONY: bench-footprint
bench-footprint: lib
	@bench/footprint.sh

# ---------------------------------------------------------------------------

run: lib
	@tools/demo.sh

# ---------------------------------------------------------------------------
# build/myalloc-prof: a text profile's top stacks, unbiased, with standard
# errors and residency (tools/myalloc-prof.c; it names frames with
# src/prof/prof_symbol.c, linked from the static library like the rest).

$(BUILD)/myalloc-prof: tools/myalloc-prof.c $(BUILD)/libmyalloc.a
	$(CC) $(BASEFLAGS) $(SANFLAGS) -O2 -I$(BUILD) -Iinclude -Isrc -o $@ $< $(BUILD)/libmyalloc.a $(PROGLIBS)

build/myalloc-prof: $(BUILD)/myalloc-prof
	cp $< $@

all: build/myalloc-prof

# Shared libraries the profile-format tests load into a probe: built
# without -g, one with its .symtab, one stripped to .dynsym.
$(BUILD)/helpers/libprof_nog.so: test/helpers/lib/prof_nog.c
	@mkdir -p $(@D)
	$(CC) -O1 -fPIC -shared -o $@ $<

$(BUILD)/helpers/libprof_stripped.so: test/helpers/lib/prof_nog.c
	@mkdir -p $(@D)
	$(CC) -O1 -fPIC -shared -s -DPROF_NOG_STRIPPED -o $@ $<

unit-config: $(BUILD)/myalloc-prof $(BUILD)/helpers/libprof_nog.so $(BUILD)/helpers/libprof_stripped.so

# Shared libraries test_prof_unwind unwinds through (dlopen): one source
# built with and without frame pointers; two builds of another whose frames
# differ in size only (loaded one in the other's place); C++ when there is
# a C++ compiler (the test skips without it).
UNWIND_LIBS := $(BUILD)/helpers/libunwind_fp.so $(BUILD)/helpers/libunwind_nofp.so \
                $(BUILD)/helpers/libunwind_swap_a.so $(BUILD)/helpers/libunwind_swap_b.so

$(BUILD)/helpers/libunwind_fp.so: test/helpers/lib/unwind_lib.c
	@mkdir -p $(@D)
	$(CC) -O2 -g -fPIC -shared -fno-omit-frame-pointer -o $@ $<

$(BUILD)/helpers/libunwind_nofp.so: test/helpers/lib/unwind_lib.c
	@mkdir -p $(@D)
	$(CC) -O2 -g -fPIC -shared -fomit-frame-pointer -o $@ $<

$(BUILD)/helpers/libunwind_swap_%.so: test/helpers/lib/unwind_swap.c
	@mkdir -p $(@D)
	$(CC) -O1 -g -fPIC -shared -fomit-frame-pointer -DSWAP_BYTES=$(if $(filter a,$*),16,64) -o $@ $<

ifneq ($(shell command -v $(CXX) 2>/dev/null),)
UNWIND_LIBS += $(BUILD)/helpers/libunwind_cxx.so
$(BUILD)/helpers/libunwind_cxx.so: test/helpers/lib/unwind_cxx.cpp
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -O2 -g -fPIC -shared -o $@ $<
endif

unit-config: $(UNWIND_LIBS)

clean:
	rm -rf build lib

PREFIX ?= /usr/local
install: lib
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 644 lib/libmyalloc.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 lib/libmyalloc.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/myalloc.h $(DESTDIR)$(PREFIX)/include/

# ---------------------------------------------------------------------------
# Fuzzing (libFuzzer): make fuzz [FUZZ_SECONDS=60]
#
# fuzz/fuzz_conf.c (the option parser) and fuzz/fuzz_ctl.c (mallctl names
# and MIBs), built with clang -fsanitize=fuzzer,address,undefined from the
# library's sources less its malloc entry points (the sanitizers bring
# their own malloc; fuzz/stubs.c fills the gap), each run for FUZZ_SECONDS
# from the seed corpus in fuzz/corpus/. New inputs go to build/fuzz/corpus/,
# crashing inputs to build/fuzz/. test/test_fuzz_corpus.c runs the same
# entry points on the corpus in the normal suite, without clang.

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_DIR     := build/fuzz
FUZZ_FLAGS   := -std=gnu11 -g -O1 -D_GNU_SOURCE -pthread -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
                -I$(BUILD) -Iinclude -Isrc
FUZZ_LIB_SRC := $(filter-out src/core/alloc.c src/core/glibc.c src/core/jemalloc.c,$(SRC))
FUZZ_TARGETS := $(FUZZ_DIR)/fuzz_conf $(FUZZ_DIR)/fuzz_ctl

.PHONY: fuzz-build
$(FUZZ_DIR)/fuzz_%: fuzz/fuzz_%.c fuzz/stubs.c $(FUZZ_LIB_SRC) $(BUILD)/sc_tables.h Makefile
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< fuzz/stubs.c $(FUZZ_LIB_SRC) -lm

fuzz-build: $(FUZZ_TARGETS)

fuzz: fuzz-build
	@for t in conf ctl; do \
	    mkdir -p $(FUZZ_DIR)/corpus/$$t || exit 1; \
	    echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	    $(FUZZ_DIR)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -dict=fuzz/$$t.dict \
	        -artifact_prefix=$(FUZZ_DIR)/ -print_final_stats=1 \
	        $(FUZZ_DIR)/corpus/$$t fuzz/corpus/$$t || exit 1; \
	done
