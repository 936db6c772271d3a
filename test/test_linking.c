/*
 * The three ways to get myalloc into a program: LD_PRELOAD, linking
 * -lmyalloc, and static linking against libmyalloc.a. In each, every
 * allocation of the process, the C library's own included, must come from
 * myalloc.
 *
 * The program is test/helpers/libc_probe.c (see there): it exercises libc
 * functions that allocate internally and reports what it saw. glibc's
 * malloc grows the heap with brk, which shows as a "[heap]" line in
 * /proc/self/maps; myalloc never uses brk. Each check is first shown to
 * fail on glibc's malloc (the probe as built, or linked statically without
 * myalloc), so that a pass means something.
 *
 * Programs compiled here go to a mkdtemp directory, removed afterwards
 * (by the tests' .fini, so also when an assertion fails).
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "sizeclass/sizeclass.h"
#include "test_util.h"

#define OUTLEN 65536

static const char *cc(void)
{
    const char *c = getenv("CC");
    return c != NULL && *c != '\0' ? c : "cc";
}

/* Absolute path of something in the build directory. */
static void build_path(char *out, const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", tu_build_dir(), rel);
    cr_assert_not_null(realpath(p, out), "%s is missing (build it with make)", p);
}

static void abs_build_dir(char *out)
{
    cr_assert_not_null(realpath(tu_build_dir(), out), "no build directory %s", tu_build_dir());
}

static void abs_probe_source(char *out)
{
    cr_assert_not_null(realpath("test/helpers/libc_probe.c", out),
                       "test/helpers/libc_probe.c not found (tests run from the repository root)");
}

static char tmpdir[PATH_MAX];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/myalloc-linking-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[PATH_MAX + 32], out[256];
    if (tmpdir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        tu_run(cmd, out, sizeof(out));
        tmpdir[0] = '\0';
    }
}

/* Value of "key=" in the probe's output; -1 when absent. */
static long val(const char *out, const char *key)
{
    char k[64];
    snprintf(k, sizeof(k), "%s=", key);
    size_t kl = strlen(k);
    for (const char *s = out; (s = strstr(s, k)) != NULL; s++)
        if (s == out || s[-1] == '\n')
            return strtol(s + kl, NULL, 10);
    return -1;
}

/* The "lo-hi" range after "key=", as numbers; 0 if absent. */
static int range(const char *out, const char *key, unsigned long *lo, unsigned long *hi)
{
    char k[64];
    snprintf(k, sizeof(k), "\n%s=", key);
    const char *s = strstr(out, k);
    return s != NULL && sscanf(s + strlen(k), "%lx-%lx", lo, hi) == 2;
}

/* Run a probe binary; out gets its output; asserts it worked as a program. */
static void run_probe(const char *env, const char *bin, char *out, size_t outlen)
{
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD -u MYALLOC_CONF %s '%s'", env, bin);
    int rc = tu_run(cmd, out, outlen);
    cr_assert_eq(rc, 0, "%s exited with %d:\n%s", cmd, rc, out);
    cr_assert_eq(val(out, "done"), 1, "%s did not finish:\n%s", cmd, out);
}

/* What must hold when glibc's malloc serves the process: the control that
 * shows the checks below can fail. */
static void expect_glibc(const char *out, const char *what, int is_static)
{
    long usable1 = val(out, "usable1");
    cr_assert_neq(usable1, (long)QUANTUM,
                  "%s: glibc's malloc_usable_size(malloc(1)) equals myalloc's smallest class (%zu): "
                  "the check cannot tell them apart\n%s",
                  what, (size_t)QUANTUM, out);
    cr_assert_eq(val(out, "myalloc_mapped"), 0, "%s:\n%s", what, out);
    if (!is_static) {
        cr_assert_eq(val(out, "heap_after"), 1,
                     "%s: no [heap] mapping with glibc's malloc, so its absence would prove nothing\n%s",
                     what, out);
        cr_assert_gt(val(out, "ptrs_in_heap"), 0, "%s:\n%s", what, out);
    } else {
        /* A static program's [heap] exists from the start (the TLS block);
         * glibc's malloc grows it and puts objects there. */
        unsigned long lo0 = 0, hi0 = 0, lo1 = 0, hi1 = 0;
        cr_assert(range(out, "heap_after_range", &lo1, &hi1), "%s:\n%s", what, out);
        range(out, "heap_before_range", &lo0, &hi0);
        cr_assert(hi1 > hi0 || lo0 == 0, "%s: glibc's malloc did not grow the heap\n%s", what, out);
        cr_assert_gt(val(out, "ptrs_in_heap"), 0, "%s:\n%s", what, out);
    }
}

/* What must hold when myalloc serves every allocation of the process. */
static void expect_myalloc(const char *out, const char *what, int is_static)
{
    cr_assert_eq(val(out, "usable1"), (long)QUANTUM,
                 "%s: malloc_usable_size(malloc(1)) is not myalloc's smallest class %zu\n%s", what,
                 (size_t)QUANTUM, out);
    cr_assert_eq(val(out, "ptrs_in_heap"), 0, "%s: objects in the brk heap\n%s", what, out);
    if (!is_static) {
        cr_assert_eq(val(out, "heap_after"), 0,
                     "%s: a [heap] (brk) mapping exists: glibc's malloc ran\n%s", what, out);
        cr_assert_eq(val(out, "myalloc_mapped"), 1, "%s: libmyalloc is not mapped\n%s", what, out);
    } else {
        /* The [heap] of the TLS block may exist, but nothing grows it. */
        unsigned long lo0 = 0, hi0 = 0, lo1 = 0, hi1 = 0;
        int before = range(out, "heap_before_range", &lo0, &hi0);
        int after = range(out, "heap_after_range", &lo1, &hi1);
        cr_assert(!after || (before && lo0 == lo1 && hi0 == hi1),
                  "%s: the brk heap grew: glibc's malloc ran\n%s", what, out);
    }
    /* FILE, DIR, getline/asprintf/open_memstream/strdup buffers: libc made
     * them; myalloc answers 0 for pointers it did not hand out. */
    long objs = val(out, "libc_objs");
    cr_assert_gt(objs, 10, "%s:\n%s", what, out);
    cr_assert_eq(val(out, "libc_objs_usable"), objs,
                 "%s: some objects the C library allocated are unknown to myalloc\n%s", what, out);
    /* mallinfo2 is myalloc's: a live 1 MiB block counts as in use, and
     * nothing is "mmapped" (glibc puts it in hblkhd, not uordblks). */
    cr_assert_geq(val(out, "mi_uordblks"), 1L << 20, "%s:\n%s", what, out);
    cr_assert_eq(val(out, "mi_hblkhd"), 0, "%s:\n%s", what, out);
}

Test(linking, ld_preload_serves_libc_internal_allocations, .timeout = 60)
{
    char probe[PATH_MAX], so[PATH_MAX], env[PATH_MAX + 32];
    static char out[OUTLEN];
    build_path(probe, "helpers/libc_probe");
    build_path(so, "libmyalloc.so");

    run_probe("", probe, out, sizeof(out));
    expect_glibc(out, "libc_probe without LD_PRELOAD", 0);

    snprintf(env, sizeof(env), "LD_PRELOAD='%s'", so);
    run_probe(env, probe, out, sizeof(out));
    expect_myalloc(out, "libc_probe with LD_PRELOAD", 0);
    cr_assert_eq(val(out, "heap_before"), 0, "a [heap] existed before main:\n%s", out);
}

/* Loaded with dlopen (given static TLS room), the jemalloc entry points
 * must keep to myalloc: dallocx and sallocx once reached the exported free
 * and malloc_usable_size through the symbol table, which in such a process
 * are glibc's (free(): invalid pointer, abort). */
Test(linking, jemalloc_entry_points_keep_to_myalloc_when_dlopened, .timeout = 60)
{
    char probe[PATH_MAX], so[PATH_MAX], env[PATH_MAX + 64];
    static char out[OUTLEN];
    build_path(probe, "helpers/dlopen_probe");
    build_path(so, "libmyalloc.so");
    snprintf(env, sizeof(env), "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=1000000");
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD -u MYALLOC_CONF %s '%s' '%s'", env, probe, so);
    int rc = tu_run(cmd, out, sizeof(out));
    cr_assert_eq(rc, 0, "%s exited with %d:\n%s", cmd, rc, out);
    if (val(out, "dlopen_failed") == 1)
        cr_skip_test("no static TLS room for a dlopen'ed libmyalloc here:\n%s", out);
    cr_assert_eq(val(out, "usable100"), (long)sc_s2u(100), "sallocx did not answer as myalloc:\n%s", out);
}

Test(linking, dynamic_link_with_lmyalloc, .timeout = 60, .fini = remove_tmpdir)
{
    char dir[PATH_MAX], src[PATH_MAX], bin[PATH_MAX + 32], cmd[4 * PATH_MAX];
    static char out[OUTLEN];
    abs_build_dir(dir);
    abs_probe_source(src);
    make_tmpdir();
    snprintf(bin, sizeof(bin), "%s/probe_dyn", tmpdir);
    snprintf(cmd, sizeof(cmd), "%s -O1 -Iinclude -o '%s' '%s' -L'%s' -lmyalloc -Wl,-rpath,'%s' -pthread",
             cc(), bin, src, dir, dir);
    int rc = tu_run(cmd, out, sizeof(out));
    cr_assert_eq(rc, 0, "%s failed:\n%s", cmd, out);
    run_probe("", bin, out, sizeof(out));
    expect_myalloc(out, "libc_probe linked with -lmyalloc", 0);
    remove_tmpdir();
}

Test(linking, static_link_against_libmyalloc_a, .timeout = 120, .fini = remove_tmpdir)
{
    if (tu_sanitizer() != NULL)
        cr_skip_test("a sanitized libmyalloc.a links only with the sanitizer's runtime, not statically");
    char dir[PATH_MAX], src[PATH_MAX], bin[PATH_MAX + 32], ctl[PATH_MAX + 32], cmd[4 * PATH_MAX];
    static char out[OUTLEN];
    abs_build_dir(dir);
    abs_probe_source(src);
    make_tmpdir();

    /* Is a static C library there at all? */
    snprintf(bin, sizeof(bin), "%s/trivial", tmpdir);
    snprintf(cmd, sizeof(cmd), "printf 'int main(void){return 0;}\\n' | %s -static -x c -o '%s' -", cc(),
             bin);
    if (tu_run(cmd, out, sizeof(out)) != 0) {
        remove_tmpdir();
        cr_skip_test("static linking impossible here (no static C library? Debian: apt-get install "
                     "libc6-dev): %s",
                     out);
    }

    /* Control: the same program, static, on glibc's own malloc. */
    snprintf(ctl, sizeof(ctl), "%s/probe_static_glibc", tmpdir);
    snprintf(cmd, sizeof(cmd), "%s -static -O1 -DPROBE_NO_NSS -o '%s' '%s' -pthread", cc(), ctl, src);
    int rc = tu_run(cmd, out, sizeof(out));
    cr_assert_eq(rc, 0, "%s failed:\n%s", cmd, out);
    run_probe("", ctl, out, sizeof(out));
    expect_glibc(out, "static libc_probe on glibc's malloc", 1);

    /* The real thing. */
    snprintf(bin, sizeof(bin), "%s/probe_static", tmpdir);
    snprintf(cmd, sizeof(cmd), "%s -static -O1 -DPROBE_NO_NSS -Iinclude -o '%s' '%s' '%s/libmyalloc.a' -lpthread -lm",
             cc(), bin, src, dir);
    rc = tu_run(cmd, out, sizeof(out));
    cr_assert_eq(rc, 0, "static link against libmyalloc.a failed:\n%s\n%s", cmd, out);
    run_probe("", bin, out, sizeof(out));
    expect_myalloc(out, "static libc_probe with libmyalloc.a", 1);

    /* glibc's allocator must not even be linked in (its internals would be
     * there if malloc.o had been pulled); the control shows they would. */
    if (tu_run("command -v nm", out, sizeof(out)) == 0) {
        const char *pat = "' (_int_malloc|_int_free|sysmalloc|malloc_consolidate)$'";
        snprintf(cmd, sizeof(cmd), "nm '%s' | grep -cE %s", ctl, pat);
        tu_run(cmd, out, sizeof(out));
        cr_assert_gt(atoi(out), 0, "nm finds no glibc malloc internals in the control: %s", out);
        snprintf(cmd, sizeof(cmd), "nm '%s' | grep -E %s", bin, pat);
        tu_run(cmd, out, sizeof(out));
        cr_assert_eq(out[0], '\0', "glibc's malloc is linked into the static program:\n%s", out);
    }
    remove_tmpdir();
}

/* The allocator makes its system calls itself (common/sys.h). Every libc
 * wrapper called would map another 64 KiB of libc's text into every
 * process (the kernel's fault-around), and would set errno on failure. */
Test(linking, the_library_uses_no_libc_system_call_wrapper, .timeout = 60)
{
    char so[PATH_MAX], cmd[PATH_MAX + 64];
    static char out[OUTLEN];
    build_path(so, "libmyalloc.so");
    snprintf(cmd, sizeof(cmd), "nm -D --undefined-only '%s'", so);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s failed:\n%s", cmd, out);
    cr_assert_not_null(strstr(out, "pthread_key_create"), "nm listed no imports:\n%s", out);
    static const char *const wrappers[] = {"mmap", "mmap64", "munmap", "madvise", "syscall",
                                           "sched_getaffinity", "__sched_cpucount"};
    for (size_t i = 0; i < MA_ARRAY_LEN(wrappers); i++) {
        char sym[64];
        snprintf(sym, sizeof(sym), " U %s@", wrappers[i]);
        cr_assert_null(strstr(out, sym), "libmyalloc.so imports %s:\n%s", wrappers[i], out);
    }
}

/* Run static_pages_probe (a program that allocates without profiling) on
 * the library; out gets its report. */
static void run_static_pages_probe(char *out, size_t outlen)
{
    char so[PATH_MAX], bin[PATH_MAX], env[PATH_MAX + 32];
    build_path(so, "libmyalloc.so");
    build_path(bin, "helpers/static_pages_probe");
    snprintf(env, sizeof(env), "LD_PRELOAD='%s'", so);
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD -u MYALLOC_CONF %s '%s'", env, bin);
    cr_assert_eq(tu_run(cmd, out, outlen), 0, "%s failed:\n%s", cmd, out);
}

/* The allocator's static state in a program that does not profile: the
 * small variables lie together in .bss, the large arrays after them in
 * .lbss (MA_LARGE_BSS) with only the slots in use touched, and the
 * profiler's pool is set up at its first sample. Scattered among the
 * arrays, the small variables kept 9 pages of .bss resident (12 in all). */
Test(linking, a_program_that_does_not_profile_keeps_few_static_pages, .timeout = 60)
{
    if (tu_sanitizer() != NULL)
        cr_skip_test("the sanitizer's runtime has static data of its own");
    static char out[OUTLEN];
    run_static_pages_probe(out, sizeof(out));
    long segment = val(out, "segment_pages"), resident = val(out, "resident_pages");
    cr_log_info("static pages: %ld resident of %ld", resident, segment);
    cr_assert_gt(segment, 100, "the writable segment (with .lbss) is not where expected:\n%s", out);
    cr_assert_gt(resident, 0, "%s", out);
    cr_assert_leq(resident, 8, "%ld pages of the allocator's static data resident", resident);
}

/* The warm code (the interfaces beyond malloc, free, calloc and realloc,
 * options, fork, controls: Makefile, WARM_SRC) and the cold code
 * (profiling, mallctl, reports), and the cold read-only data with the
 * unwind tables, in mappings of their own: a page fault maps the pages
 * around the one it faults in, in one fresh copy of the library all of the
 * text up to a 128 KiB boundary, so in one mapping with the rest they were
 * resident in every process. */
Test(linking, a_program_that_only_allocates_maps_none_of_the_warm_or_cold_code, .timeout = 60)
{
    static char out[OUTLEN];
    run_static_pages_probe(out, sizeof(out));
    cr_assert_eq(val(out, "code_segments"), 3, "not three executable segments:\n%s", out);
    long hot = val(out, "code_mapped_0"), warm = val(out, "code_mapped_1"), cold = val(out, "code_mapped_2");
    cr_log_info("code pages mapped: %ld of %ld, warm %ld of %ld, cold %ld of %ld", hot, val(out, "code_pages_0"),
                warm, val(out, "code_pages_1"), cold, val(out, "code_pages_2"));
    cr_assert_gt(hot, 0, "pagemap showed none of the allocation paths mapped:\n%s", out);
    cr_assert_eq(warm, 0, "%ld pages of the warm code mapped in a program that only allocates", warm);
    cr_assert_eq(cold, 0, "%ld pages of the cold code mapped in a program that only allocates", cold);
    long unwind = val(out, "unwind_mapped");
    cr_assert_geq(unwind, 0, "no segment with the unwind tables:\n%s", out);
    cr_assert_eq(unwind, 0, "%ld pages of the unwind tables mapped in a program that only allocates", unwind);
}

/* What `tool` (a command and its options) prints about the library whose
 * code layout the tests below check: the optimised build's (instrumented
 * code is larger). The buffer is the next call's too. */
static char *layout_tool_output(const char *tool)
{
    if (tu_sanitizer() != NULL)
        cr_skip_test("instrumented code is larger: the layout is the optimised build's");
    char so[PATH_MAX], cmd[PATH_MAX + 64];
    static char out[1 << 20];
    build_path(so, "libmyalloc.so");
    snprintf(cmd, sizeof(cmd), "%s '%s'", tool, so);
    cr_assert_eq(tu_run(cmd, out, sizeof(out)), 0, "%s failed", cmd);
    return out;
}

/* The symbol on a line of `nm -n -S` (size 0 where nm gives none). */
static bool nm_symbol(const char *line, unsigned long *addr, unsigned long *size, char *type, char name[256])
{
    *size = 0;
    return sscanf(line, "%lx %lx %c %255s", addr, size, type, name) == 4 ||
           sscanf(line, "%lx %c %255s", addr, type, name) == 3;
}

/* The executable PT_LOAD segments of the library, in address order (at
 * most 4), from `readelf -lW`; returns how many. */
static unsigned code_segments(unsigned long lo[4], unsigned long hi[4])
{
    char *out = layout_tool_output("readelf -lW");
    unsigned n = 0;
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        unsigned long off, vaddr, paddr, filesz, memsz;
        char flags[8] = "", type[16];
        int got = sscanf(line, " %15s %lx %lx %lx %lx %lx %7[RWE ]", type, &off, &vaddr, &paddr, &filesz, &memsz,
                         flags);
        if (got < 7 || strcmp(type, "LOAD") != 0 || strchr(flags, 'E') == NULL)
            continue;
        cr_assert_lt(n, 4, "more than 4 executable segments");
        lo[n] = vaddr;
        hi[n] = vaddr + memsz;
        n++;
    }
    return n;
}

/* The names of the functions that the objects (build paths) keep in their
 * own .text, each between spaces, into names. */
static void own_text_functions(const char *const *objs, size_t nobjs, char *names, size_t cap)
{
    char cmd[4 * PATH_MAX + 32] = "objdump -t";
    for (size_t i = 0; i < nobjs; i++) {
        char path[PATH_MAX];
        build_path(path, objs[i]);
        size_t len = strlen(cmd);
        snprintf(cmd + len, sizeof(cmd) - len, " '%s'", path);
    }
    static char objout[1 << 20];
    cr_assert_eq(tu_run(cmd, objout, sizeof(objout)), 0, "%s failed", cmd);
    size_t n = 0;
    for (char *line = strtok(objout, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *sec = strstr(line, " F .text\t");
        char *name = sec != NULL ? strrchr(line, ' ') : NULL;
        if (name == NULL || n + strlen(name) + 2 > cap)
            continue;
        n += (size_t)snprintf(names + n, cap - n, "%s ", name);
    }
    cr_assert_gt(n, 0, "objdump listed no function of %s", objs[0]);
}

/* The function name at addr lies in the segment seg (in): if it is one of
 * the functions of files (names between spaces; counted in *nfiles) or
 * one of named (counted in *nnamed). */
static void check_segment(const char *name, unsigned long addr, bool in, const char *seg, const char *files,
                          const char *const *named, size_t nnamed_total, unsigned *nfiles, unsigned *nnamed)
{
    char key[260];
    snprintf(key, sizeof(key), " %s ", name);
    if (files != NULL && strstr(files, key) != NULL) {
        (*nfiles)++;
        cr_assert(in, "%s (a %s file's) at %#lx, outside the %s segment", name, seg, addr, seg);
    }
    for (size_t i = 0; i < nnamed_total; i++)
        if (strcmp(name, named[i]) == 0) {
            (*nnamed)++;
            cr_assert(in, "%s at %#lx, outside the %s segment", name, addr, seg);
        }
}

/* The layout the Makefile makes (WARM_SRC, COLD_SRC): three executable
 * segments, each past a hole of at least a page (so that they are separate
 * mappings). The first holds what every program runs: the allocation
 * paths, what runs at start-up and exit, and the functions of warm and cold
 * files marked MA_HOT_TEXT. The second, the warm code: the warm files'
 * functions and those marked MA_WARM_TEXT. The third, the cold files'
 * code, with their read-only data after it. */
Test(linking, the_warm_and_the_cold_code_lie_in_segments_of_their_own, .timeout = 60)
{
    unsigned long lo[4], hi[4];
    cr_assert_eq(code_segments(lo, hi), 3, "the library does not have three executable segments");
    /* The system's page, not the allocator's (the configurations of other
     * page sizes are built for the same system). */
    const unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE);
    for (unsigned i = 1; i < 3; i++)
        cr_assert_geq(lo[i], MA_ALIGN_UP(hi[i - 1], page) + page,
                      "no hole between segments %u and %u: [%#lx, %#lx), [%#lx, %#lx)", i - 1, i, lo[i - 1],
                      hi[i - 1], lo[i], hi[i]);

    /* The cold files' read-only data lies past the cold code, with the
     * unwind tables (what a program that does not profile never reads). */
    unsigned long rodata_cold = 0, rodata_cold_size = 0, eh_hdr = 0;
    char *sections = layout_tool_output("readelf -SW");
    for (char *line = strtok(sections, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *name = strstr(line, "] ");
        unsigned long addr, off, size;
        char sec[64], type[32];
        if (name == NULL || sscanf(name + 2, "%63s %31s %lx %lx %lx", sec, type, &addr, &off, &size) != 5)
            continue;
        if (strcmp(sec, ".rodata.cold") == 0) {
            rodata_cold = addr;
            rodata_cold_size = size;
        } else if (strcmp(sec, ".eh_frame_hdr") == 0) {
            eh_hdr = addr;
        }
    }
    cr_assert_gt(rodata_cold_size, 0, "no .rodata.cold section");
    cr_assert_geq(rodata_cold, hi[2], ".rodata.cold at %#lx, before the end of the cold code at %#lx", rodata_cold,
                  hi[2]);
    cr_assert_geq(eh_hdr, rodata_cold + rodata_cold_size, "the unwind tables at %#lx do not follow .rodata.cold",
                  eh_hdr);

    /* The functions the warm and cold files keep in their own text (not
     * MA_HOT_TEXT). */
    static char warmnames[1 << 16], coldnames[1 << 16];
    static const char *const warm_objs[] = {"obj/core/jemalloc.o", "obj/core/glibc.o", "obj/core/conf.o",
                                            "obj/core/background.o"};
    static const char *const cold_objs[] = {"obj/prof/prof.o", "obj/core/ctl.o", "obj/common/math.o"};
    own_text_functions(warm_objs, MA_ARRAY_LEN(warm_objs), warmnames, sizeof(warmnames));
    own_text_functions(cold_objs, MA_ARRAY_LEN(cold_objs), coldnames, sizeof(coldnames));

    char *out = layout_tool_output("nm -n -S");
    static const char *const every[] = {"malloc", "free", "calloc", "realloc", "ma_alloc_slow", "ma_free_slow",
                                        "tcache_alloc_hard", "arena_fill_small_max", "extent_alloc",
                                        "ma_init_hard", "tcache_init", "tsd_cleanup", "tcache_destroy",
                                        "tcache_flush", "conf_init", "ma_decay_hook", "arena_decay",
                                        "arena_malloc_large", "prof_boot", "prof_boot_late", "prof_decay",
                                        "prof_unwind_count_startup_objects"};
    static const char *const warm[] = {"mallocx", "sdallocx", "malloc_trim", "mallinfo2", "posix_memalign",
                                       "aligned_alloc", "malloc_usable_size", "free_sized", "conf_parse",
                                       "ma_background_set", "arena_prefork", "tcache_set_enabled",
                                       "extent_expand", "ma_fatal"};
    static const char *const cold[] = {"mallctl", "malloc_stats_print", "prof_write_pprof", "prof_dump",
                                       "prof_backtrace"};
    unsigned nevery = 0, nwarm = 0, nnamed = 0, nlisted = 0, nwarm_listed = 0;
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        unsigned long addr, size;
        char type, name[256];
        if (!nm_symbol(line, &addr, &size, &type, name) || (type != 't' && type != 'T'))
            continue;
        bool in_warm = addr >= lo[1] && addr + size <= hi[1];
        bool in_cold = addr >= lo[2] && addr + size <= hi[2];
        bool in_first = addr >= lo[0] && addr + size <= hi[0];
        check_segment(name, addr, in_warm, "warm", warmnames, warm, MA_ARRAY_LEN(warm), &nwarm_listed, &nwarm);
        check_segment(name, addr, in_cold, "cold", coldnames, cold, MA_ARRAY_LEN(cold), &nlisted, &nnamed);
        check_segment(name, addr, in_first, "first", NULL, every, MA_ARRAY_LEN(every), NULL, &nevery);
    }
    cr_assert_gt(nwarm_listed, 0, "nm listed none of the warm files' functions");
    cr_assert_eq(nwarm, MA_ARRAY_LEN(warm), "nm listed %u of the %zu warm functions", nwarm, MA_ARRAY_LEN(warm));
    cr_assert_gt(nlisted, 0, "nm listed none of the cold files' functions");
    cr_assert_eq(nnamed, MA_ARRAY_LEN(cold), "nm listed %u of the %zu cold functions", nnamed, MA_ARRAY_LEN(cold));
    cr_assert_eq(nevery, MA_ARRAY_LEN(every), "nm listed %u of the %zu functions", nevery, MA_ARRAY_LEN(every));
}
