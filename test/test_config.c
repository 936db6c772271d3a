/*
 * Configuration: the start-up page-size check, MYALLOC_CONF and the
 * malloc_conf global as a program sees them (LD_PRELOAD, linking), and the
 * option parser conf_parse() on garbage.
 */
#include <limits.h>
#include <sys/stat.h>

#include "core/conf.h"
#include "tcache/tcache.h"
#include "test_util.h"

/* ---------------------------------------------------------------------
 * Running programs.
 */

#define OUTMAX 65536

typedef struct {
    const char *path;
    char *const *argv;
    char *const *envp;
    const char *stdout_path; /* NULL: inherited */
} exec_arg_t;

static void exec_child(void *arg)
{
    exec_arg_t *x = arg;
    if (x->stdout_path != NULL) {
        int fd = open(x->stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        close(fd);
    }
    execve(x->path, x->argv, x->envp);
    _exit(127);
}

/* Run path with exactly the environment given (NULL-terminated list);
 * stderr into err; returns the wait status. */
static int run_prog(const char *path, const char *const *env, char *err, size_t errlen)
{
    char *argv[] = {(char *)path, NULL};
    exec_arg_t x = {path, argv, (char *const *)env, NULL};
    return tu_capture(exec_child, &x, err, errlen);
}

/* The same, with stdout into out as well. */
static int run_prog_out(const char *path, const char *const *env, char *err, size_t errlen, char *out,
                        size_t outlen)
{
    char tmp[] = "/tmp/myalloc_out_XXXXXX";
    int fd = mkstemp(tmp);
    cr_assert_geq(fd, 0);
    close(fd);
    char *argv[] = {(char *)path, NULL};
    exec_arg_t x = {path, argv, (char *const *)env, tmp};
    int st = tu_capture(exec_child, &x, err, errlen);
    FILE *f = fopen(tmp, "r");
    cr_assert_not_null(f);
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    fclose(f);
    unlink(tmp);
    return st;
}

static const char *abs_build_dir(void)
{
    static char buf[PATH_MAX];
    cr_assert_not_null(realpath(tu_build_dir(), buf), "no build directory %s", tu_build_dir());
    return buf;
}

static const char *abs_path_in_build(const char *rel)
{
    static char buf[2][PATH_MAX];
    static int which;
    char *b = buf[which++ & 1];
    snprintf(b, PATH_MAX, "%s/%s", abs_build_dir(), rel);
    cr_assert_eq(access(b, F_OK), 0, "missing %s", b);
    return b;
}

/* Split out into lines (modifies out); returns the count. */
static unsigned split_lines(char *out, char **lines, unsigned max)
{
    unsigned n = 0;
    char *s = out;
    while (*s != '\0') {
        char *e = strchr(s, '\n');
        cr_assert_not_null(e, "stderr does not end with a newline: \"%s\"", s);
        *e = '\0';
        if (n < max)
            lines[n] = s;
        n++;
        s = e + 1;
    }
    return n;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---------------------------------------------------------------------
 * (a) The page-size check.
 */

static const char *p11_library(void)
{
    static char buf[PATH_MAX];
    /* build/<this config> -> build/p11-q4-g2 */
    snprintf(buf, sizeof(buf), "%s/../p11-q4-g2/libmyalloc.so", abs_build_dir());
    static char real[PATH_MAX];
    cr_assert_not_null(realpath(buf, real), "missing %s (make unit builds it)", buf);
    return real;
}

static void check_page_size_abort(const char *prog)
{
    char preload[PATH_MAX + 16], err[OUTMAX];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", p11_library());
    const char *env[] = {preload, NULL};
    int st = run_prog(prog, env, err, sizeof(err));
    char copy[OUTMAX];
    strcpy(copy, err);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
              "%s with a 2 KiB-page library must abort; status %#x, stderr \"%s\"", prog, st, err);
    char *lines[8];
    unsigned n = split_lines(copy, lines, 8);
    cr_assert_eq(n, 1, "want exactly one stderr line, got %u: \"%s\"", n, err);
    cr_assert(starts_with(lines[0], "<myalloc>: "), "line: \"%s\"", lines[0]);
    cr_assert_not_null(strstr(lines[0], "2048"), "must name the 2048-byte build: \"%s\"", lines[0]);
    char sys[32];
    snprintf(sys, sizeof(sys), "%ld", sysconf(_SC_PAGESIZE));
    cr_assert_not_null(strstr(lines[0], sys), "must name the system page size %s: \"%s\"", sys,
                       lines[0]);
    cr_assert_not_null(strstr(lines[0], "page"), "\"%s\"", lines[0]);
}

Test(config, page_size_mismatch_aborts_a_program_that_allocates)
{
    check_page_size_abort(abs_path_in_build("helpers/malloc_touch"));
}

/* DESIGN.md: "the page size actually in use is checked at startup and a
 * mismatch is a clear fatal error" -- also for a program that never calls
 * malloc itself. */
Test(config, page_size_mismatch_aborts_at_startup)
{
    check_page_size_abort("/bin/true");
}

/* ---------------------------------------------------------------------
 * (b) MYALLOC_CONF under LD_PRELOAD.
 */

/* Run the helper with the default library preloaded and MYALLOC_CONF=conf
 * (NULL: unset). */
static int run_with_conf(const char *conf, char *err, size_t errlen)
{
    char preload[PATH_MAX + 16], confvar[8192];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", abs_path_in_build("libmyalloc.so"));
    const char *env[3] = {preload, NULL, NULL};
    if (conf != NULL) {
        snprintf(confvar, sizeof(confvar), "MYALLOC_CONF=%s", conf);
        env[1] = confvar;
    }
    return run_prog(abs_path_in_build("helpers/malloc_touch"), env, err, errlen);
}

Test(config, good_pairs_are_accepted_silently)
{
    const char *good[] = {
        "narenas:3",
        "tcache:false",
        "tcache_max:4096",
        "narenas:3,tcache:false,tcache_max:4096",
        "tcache:true,tcache_max:0x1000,abort_conf:false",
        "abort_conf:true,narenas:1,tcache:true",
        "tcache_max:0",
        "narenas:3,",
        "",
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(good); i++) {
        char err[OUTMAX];
        int st = run_with_conf(good[i], err, sizeof(err));
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "MYALLOC_CONF=\"%s\": status %#x, \"%s\"",
                  good[i], st, err);
        cr_assert_str_empty(err, "MYALLOC_CONF=\"%s\" printed \"%s\"", good[i], err);
    }
}

typedef struct {
    const char *pair;
    const char *names[2]; /* what its line must name */
} bad_pair_t;

static const bad_pair_t bad_pairs[] = {
    {"no_such_option:1", {"no_such_option", NULL}},
    {"narenas:notanumber", {"narenas", "notanumber"}},
    {"garbage_without_colon", {"garbage_without_colon", NULL}},
    {"tcache:maybe", {"tcache", "maybe"}},
    {"narenas:-1", {"narenas", "-1"}},
    {"tcache_max:99999999999999999999999", {"tcache_max", "99999999999999999999999"}},
    {"narenas:99999", {"narenas", "99999"}},
};

Test(config, each_bad_pair_gives_one_line_naming_it_and_the_program_runs)
{
    for (size_t i = 0; i < MA_ARRAY_LEN(bad_pairs); i++) {
        char err[OUTMAX], copy[OUTMAX];
        char conf[512];
        /* A good pair on each side: the bad one is reported, the others are not. */
        snprintf(conf, sizeof(conf), "tcache:true,%s,narenas:2", bad_pairs[i].pair);
        int st = run_with_conf(conf, err, sizeof(err));
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "MYALLOC_CONF=\"%s\": status %#x, \"%s\"",
                  conf, st, err);
        strcpy(copy, err);
        char *lines[8];
        unsigned n = split_lines(copy, lines, 8);
        cr_assert_eq(n, 1, "MYALLOC_CONF=\"%s\": want one line, got %u: \"%s\"", conf, n, err);
        cr_assert(starts_with(lines[0], "<myalloc>: MYALLOC_CONF: "), "\"%s\"", lines[0]);
        for (int k = 0; k < 2 && bad_pairs[i].names[k] != NULL; k++)
            cr_assert_not_null(strstr(lines[0], bad_pairs[i].names[k]), "line \"%s\" must name \"%s\"",
                               lines[0], bad_pairs[i].names[k]);
    }
}

Test(config, several_bad_pairs_one_line_each_in_order)
{
    char conf[4096] = "";
    for (size_t i = 0; i < MA_ARRAY_LEN(bad_pairs); i++) {
        strcat(conf, bad_pairs[i].pair);
        strcat(conf, i % 2 ? ",narenas:3," : ",");
    }
    strcat(conf, "tcache_max:4096");
    char err[OUTMAX], copy[OUTMAX];
    int st = run_with_conf(conf, err, sizeof(err));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x, \"%s\"", st, err);
    strcpy(copy, err);
    char *lines[32];
    unsigned n = split_lines(copy, lines, 32);
    cr_assert_eq(n, MA_ARRAY_LEN(bad_pairs), "want %zu lines, got %u: \"%s\"", MA_ARRAY_LEN(bad_pairs),
                 n, err);
    for (size_t i = 0; i < n; i++) {
        cr_assert(starts_with(lines[i], "<myalloc>: MYALLOC_CONF: "), "\"%s\"", lines[i]);
        cr_assert_not_null(strstr(lines[i], bad_pairs[i].names[0]), "line %zu \"%s\" must name \"%s\"",
                           i, lines[i], bad_pairs[i].names[0]);
    }
}

Test(config, abort_conf_makes_a_bad_pair_fatal)
{
    const char *confs[] = {
        "abort_conf:true,no_such_option:1",
        "no_such_option:1,abort_conf:true",
        "abort_conf:true,narenas:notanumber",
        "narenas:2,garbage,abort_conf:true",
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(confs); i++) {
        char err[OUTMAX];
        int st = run_with_conf(confs[i], err, sizeof(err));
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                  "MYALLOC_CONF=\"%s\" must abort; status %#x, \"%s\"", confs[i], st, err);
        cr_assert(starts_with(err, "<myalloc>: MYALLOC_CONF: "), "\"%s\"", err);
    }
    /* abort_conf:false (the default) keeps going. */
    char err[OUTMAX];
    int st = run_with_conf("abort_conf:false,no_such_option:1", err, sizeof(err));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
}

/* Programs linked against the shared library (-L, -l, rpath). They print
 * the options in effect (read back with mallctl) on stdout; with_conf also
 * defines the malloc_conf global. */
static const char *build_program(const char *dir, bool with_conf)
{
    static char prog[2][PATH_MAX];
    char *out_path = prog[with_conf];
    char src[PATH_MAX], cmd[6 * PATH_MAX], out[OUTMAX], inc[PATH_MAX + 32];
    snprintf(src, sizeof(src), "%s/prog%d.c", dir, with_conf);
    snprintf(out_path, PATH_MAX, "%s/prog%d", dir, with_conf);
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    fputs("#include <stdbool.h>\n"
          "#include <stdio.h>\n"
          "#include <stdlib.h>\n"
          "#include \"myalloc.h\"\n",
          f);
    if (with_conf)
        fputs("const char *malloc_conf = \"narenas:notanumber\";\n", f);
    fputs("int main(void)\n"
          "{\n"
          "    char *volatile p = malloc(100);\n"
          "    p[0] = 1;\n"
          "    free(p);\n"
          "    unsigned n = 0; bool t = false; size_t m = 0, len;\n"
          "    len = sizeof(n); if (mallctl(\"opt.narenas\", &n, &len, NULL, 0)) return 2;\n"
          "    len = sizeof(t); if (mallctl(\"opt.tcache\", &t, &len, NULL, 0)) return 3;\n"
          "    len = sizeof(m); if (mallctl(\"opt.tcache_max\", &m, &len, NULL, 0)) return 4;\n"
          "    printf(\"narenas=%u tcache=%d tcache_max=%zu\\n\", n, (int)t, m);\n"
          "    return 0;\n"
          "}\n",
          f);
    fclose(f);
    const char *b = abs_build_dir();
    char incdir[PATH_MAX + 16];
    snprintf(incdir, sizeof(incdir), "%s/../../include", b);
    cr_assert_not_null(realpath(incdir, inc), "no include directory next to %s", b);
    snprintf(cmd, sizeof(cmd), "cc -I%s -o %s %s -L%s -lmyalloc -Wl,-rpath,%s", inc, out_path, src, b, b);
    int rc = tu_run(cmd, out, sizeof(out));
    cr_assert_eq(rc, 0, "%s failed: %s", cmd, out);
    return out_path;
}

static void remove_dir(const char *dir)
{
    char cmd[PATH_MAX + 16], out[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    tu_run(cmd, out, sizeof(out));
}

Test(config, conf_values_take_effect)
{
    char dir[] = "/tmp/myalloc_conf_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *prog = build_program(dir, false);
    char err[OUTMAX], out[OUTMAX];
    struct {
        const char *env, *want;
        unsigned nwarn;
    } runs[] = {
        {"MYALLOC_CONF=narenas:3,tcache:false,tcache_max:4096", "narenas=3 tcache=0 tcache_max=4096\n", 0},
        {"MYALLOC_CONF=tcache_max:0x2000", "tcache=1 tcache_max=8192\n", 0},
        /* Bad pairs keep the default and the parse goes on. */
        {"MYALLOC_CONF=narenas:x,bogus,narenas:5,tcache_max:-1", "narenas=5 tcache=1 tcache_max=32768\n", 3},
        /* A later pair wins. */
        {"MYALLOC_CONF=narenas:2,narenas:6", "narenas=6 ", 0},
    };
    for (size_t i = 0; i < MA_ARRAY_LEN(runs); i++) {
        const char *env[] = {runs[i].env, NULL};
        int st = run_prog_out(prog, env, err, sizeof(err), out, sizeof(out));
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %#x, \"%s\"", runs[i].env, st, err);
        cr_assert_not_null(strstr(out, runs[i].want), "%s: options \"%s\", want \"%s\"", runs[i].env, out,
                           runs[i].want);
        char *lines[16];
        unsigned n = split_lines(err, lines, 16);
        cr_assert_eq(n, runs[i].nwarn, "%s: %u stderr lines", runs[i].env, n);
    }
    remove_dir(dir);
}

Test(config, malloc_conf_global_is_read)
{
    char dir[] = "/tmp/myalloc_conf_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *prog = build_program(dir, true);

    char err[OUTMAX], copy[OUTMAX], out[OUTMAX];
    char *lines[8];
    const char *noenv[] = {NULL};
    int st = run_prog_out(prog, noenv, err, sizeof(err), out, sizeof(out));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x, \"%s\"", st, err);
    strcpy(copy, err);
    unsigned n = split_lines(copy, lines, 8);
    cr_assert_eq(n, 1, "want one line, got %u: \"%s\"", n, err);
    cr_assert(starts_with(lines[0], "<myalloc>: malloc_conf: "), "\"%s\"", lines[0]);
    cr_assert_not_null(strstr(lines[0], "narenas"), "\"%s\"", lines[0]);
    cr_assert_not_null(strstr(lines[0], "notanumber"), "\"%s\"", lines[0]);
    cr_assert_not_null(strstr(out, "narenas=0 "), "the bad value keeps the default: \"%s\"", out);

    /* Both sources: malloc_conf first, then MYALLOC_CONF. */
    const char *env2[] = {"MYALLOC_CONF=no_such_option:1", NULL};
    st = run_prog_out(prog, env2, err, sizeof(err), out, sizeof(out));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x, \"%s\"", st, err);
    strcpy(copy, err);
    n = split_lines(copy, lines, 8);
    cr_assert_eq(n, 2, "want two lines, got %u: \"%s\"", n, err);
    cr_assert(starts_with(lines[0], "<myalloc>: malloc_conf: "), "\"%s\"", lines[0]);
    cr_assert(starts_with(lines[1], "<myalloc>: MYALLOC_CONF: "), "\"%s\"", lines[1]);
    cr_assert_not_null(strstr(lines[1], "no_such_option"));

    /* abort_conf from the environment covers malloc_conf's bad pair too. */
    const char *env3[] = {"MYALLOC_CONF=abort_conf:true", NULL};
    st = run_prog_out(prog, env3, err, sizeof(err), out, sizeof(out));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %#x, \"%s\"", st, err);
    cr_assert(starts_with(err, "<myalloc>: malloc_conf: "), "\"%s\"", err);

    /* The environment is read after malloc_conf: its value wins. */
    const char *env4[] = {"MYALLOC_CONF=narenas:5", NULL};
    st = run_prog_out(prog, env4, err, sizeof(err), out, sizeof(out));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x, \"%s\"", st, err);
    cr_assert_not_null(strstr(out, "narenas=5 "), "\"%s\"", out);
    remove_dir(dir);
}

/* ---------------------------------------------------------------------
 * (c) conf_parse() directly.
 */

/* Every option's storage, saved before and restored after each test (the
 * parser writes the live options of this process). */
static unsigned char saved_opts[64][CONF_STRMAX];

static size_t opt_size(const conf_option_t *o)
{
    switch (o->type) {
    case CONF_BOOL: return sizeof(bool);
    case CONF_UNSIGNED: return sizeof(unsigned);
    case CONF_SIZE: return sizeof(size_t);
    case CONF_SSIZE: return sizeof(ssize_t);
    case CONF_UINT64: return sizeof(uint64_t);
    case CONF_STRING: return CONF_STRMAX;
    case CONF_CHOICE: return sizeof(unsigned);
    }
    return 0;
}

/* Known values before each parse, so that "default kept" is checkable. */
static void opts_reset(void)
{
    opt_abort_conf = false;
    opt_narenas = 7;
    tcache_opt_enabled = true;
    tcache_opt_max = 12345;
}

static void opts_save(void)
{
    cr_assert_leq(conf_noptions, MA_ARRAY_LEN(saved_opts));
    for (unsigned i = 0; i < conf_noptions; i++)
        memcpy(saved_opts[i], conf_options[i].ptr, opt_size(&conf_options[i]));
    opts_reset();
}

static void opts_restore(void)
{
    for (unsigned i = 0; i < conf_noptions; i++)
        memcpy(conf_options[i].ptr, saved_opts[i], opt_size(&conf_options[i]));
}

TestSuite(conf_parse, .init = opts_save, .fini = opts_restore);

typedef struct {
    const char *s;
    unsigned bad;
} parse_case_t;

static const parse_case_t cases[] = {
    {"", 0},
    {":::", 1},
    {":", 1},
    {":3", 1},
    {"narenas", 1},
    {"narenas:", 1},
    {"narenas:3", 0},
    {"narenas:3,", 0},
    {"narenas:-1", 1},
    {"narenas:-0x10", 1},
    {"narenas:0x", 1},
    {"narenas:0xZZ", 1},
    {"narenas:0x10", 0},
    {"narenas:4096", 0},
    {"narenas:4097", 1},
    {"narenas:99999999999999999999999", 1},
    {"narenas:18446744073709551615", 1},
    {"narenas:18446744073709551616", 1},
    {"narenas:9223372036854775807", 1},
    {"narenas:4294967299", 1},
    {"narenas:3 4", 1},
    {"narenas:3 ", 1},
    {"narenas:3x", 1},
    {"tcache_max:0x1000", 0},
    {"tcache_max:-4096", 1},
    {"tcache_max:8388608", 0},
    {"tcache_max:8388609", 1},
    {"tcache:true", 0},
    {"tcache:false", 0},
    {"tcache:TRUE", 1},
    {"tcache:yes", 1},
    {"tcache:1", 1},
    {"tcache:true ", 1},
    {"tcache:tru", 1},
    {"tcache:truex", 1},
    {"tcache: false", 1},
    {"a b:1", 1},
    {"nar enas:3", 1},
    {"narena:3", 1},
    {"narenasx:3", 1},
    {"NARENAS:3", 1},
    {"abc:def:ghi", 1},
    {"tcache:false,,narenas:2", 1},
    {"narenas:1,narenas:x,narenas:2", 1},
    {"x:1,y:2,z:3", 3},
    {"x,y,z", 3},
    {"narenas:2,tcache:false,tcache_max:64,abort_conf:false", 0},
    {"\x01\x02\xff:1", 1},
    {"\xff\xfe", 1},
    {"narenas:\xff", 1},
    /* Signed options (lg_prof_interval: -1 .. 62). */
    {"lg_prof_interval:-1", 0},
    {"lg_prof_interval:62", 0},
    {"lg_prof_interval:-2", 1},
    {"lg_prof_interval:63", 1},
    {"lg_prof_interval:- 1", 1},
    {"lg_prof_interval:-99999999999999999999", 1},
    {"lg_prof_interval:99999999999999999999", 1},
    {"lg_prof_interval:-9223372036854775808", 1},
    /* 64-bit options (prof_seed: 0 .. INT64_MAX). */
    {"prof_seed:9223372036854775807", 0},
    {"prof_seed:0x7fffffffffffffff", 0},
    {"prof_seed:9223372036854775808", 1},
    {"prof_seed:0xffffffffffffffff", 1},
    {"prof_seed:-1", 1},
    /* Choices. */
    {"prof_bt:fp", 0},
    {"prof_bt:gcc", 0},
    {"prof_bt:libgcc", 0},
    {"prof_bt:libgc", 1},
    {"prof_bt:FP", 1},
    {"prof_bt:fpx", 1},
    {"prof_bt:f", 1},
    {"prof_bt:", 1},
    /* Strings are verbatim, spaces included. */
    {"prof_prefix:/tmp/a b c", 0},
    {"prof_bt_max:0", 1},
    {"lg_prof_sample:63", 1},
    {"lg_prof_sample:19", 0},
};

Test(conf_parse, counts_bad_pairs)
{
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++) {
        opts_reset();
        unsigned bad = conf_parse("test", cases[i].s, false);
        cr_assert_eq(bad, cases[i].bad, "conf_parse(\"%s\") = %u bad pairs, want %u", cases[i].s, bad,
                     cases[i].bad);
    }
    cr_assert_eq(conf_parse("test", NULL, false), 0);
}

Test(conf_parse, values_are_set_and_bad_values_keep_the_previous_one)
{
    cr_assert_eq(conf_parse("t", "narenas:3,tcache:false,tcache_max:4096", false), 0);
    cr_assert_eq(opt_narenas, 3);
    cr_assert_eq(tcache_opt_enabled, false);
    cr_assert_eq(tcache_opt_max, 4096);

    opts_reset();
    cr_assert_eq(conf_parse("t", "tcache_max:0x1000", false), 0);
    cr_assert_eq(tcache_opt_max, 0x1000);
    cr_assert_eq(conf_parse("t", "narenas:010", false), 0, "C integer literal: octal");
    cr_assert_eq(opt_narenas, 8);

    const char *bad[] = {"narenas:-1", "narenas:99999999999999999999999", "narenas:0x",
                         "narenas:4097", "narenas:", "narenas:3 4", "narenas:18446744073709551615"};
    for (size_t i = 0; i < MA_ARRAY_LEN(bad); i++) {
        opts_reset();
        cr_assert_eq(conf_parse("t", bad[i], false), 1, "%s", bad[i]);
        cr_assert_eq(opt_narenas, 7, "\"%s\" changed narenas to %u", bad[i], opt_narenas);
    }
    opts_reset();
    cr_assert_eq(conf_parse("t", "tcache_max:-4096", false), 1);
    cr_assert_eq(tcache_opt_max, 12345);
    cr_assert_eq(conf_parse("t", "tcache:yes", false), 1);
    cr_assert_eq(tcache_opt_enabled, true);

    /* Parsing goes on after a bad pair; a later pair wins. */
    opts_reset();
    cr_assert_eq(conf_parse("t", "narenas:1,bogus,tcache:false,narenas:x,narenas:5,zz:1", false), 3);
    cr_assert_eq(opt_narenas, 5);
    cr_assert_eq(tcache_opt_enabled, false);
}

Test(conf_parse, empty_pairs_are_reported_consistently)
{
    /* An empty pair between commas is not key:value; whatever the parser
     * decides, it must never crash, and what it counts it reports. */
    const char *s[] = {",,,", ",", ",narenas:3", "narenas:3,,", ",,narenas:4,,"};
    for (size_t i = 0; i < MA_ARRAY_LEN(s); i++) {
        opts_reset();
        unsigned bad = conf_parse("t", s[i], false);
        cr_assert_leq(bad, 4, "\"%s\": %u", s[i], bad);
    }
    opts_reset();
    conf_parse("t", ",narenas:3", false);
    cr_assert_eq(opt_narenas, 3, "a leading empty pair must not stop the parse");
    conf_parse("t", ",,narenas:4,,", false);
    cr_assert_eq(opt_narenas, 4);
    cr_assert_geq(conf_parse("t", ",,,", false), 1, "\",,,\" holds no valid pair");
}

/* Long keys and values. */
static char *repeat(char c, size_t n, const char *prefix, const char *suffix)
{
    size_t pl = strlen(prefix), sl = strlen(suffix);
    char *s = malloc(pl + n + sl + 1);
    cr_assert_not_null(s);
    memcpy(s, prefix, pl);
    memset(s + pl, c, n);
    memcpy(s + pl + n, suffix, sl + 1);
    return s;
}

Test(conf_parse, very_long_keys_and_values)
{
    size_t lens[] = {31, 32, 33, 200, 201, 1023, 1024, 1025, 100000};
    for (size_t i = 0; i < MA_ARRAY_LEN(lens); i++) {
        size_t n = lens[i];
        char *k = repeat('k', n, "", ":1");
        char *v = repeat('1', n, "narenas:", "");
        char *vb = repeat('t', n, "tcache:", "");
        char *m = repeat('m', n, "", "");
        char *two = repeat('z', n, "narenas:2,", ":1,tcache:false");
        opts_reset();
        cr_assert_eq(conf_parse("t", k, false), 1, "key of %zu chars", n);
        cr_assert_eq(conf_parse("t", v, false), 1, "value of %zu digits", n);
        cr_assert_eq(opt_narenas, 7);
        cr_assert_eq(conf_parse("t", vb, false), 1);
        cr_assert_eq(conf_parse("t", m, false), 1, "malformed pair of %zu chars", n);
        cr_assert_eq(conf_parse("t", two, false), 1);
        cr_assert_eq(opt_narenas, 2);
        cr_assert_eq(tcache_opt_enabled, false);
        free(k);
        free(v);
        free(vb);
        free(m);
        free(two);
    }
    /* Strings: up to CONF_STRMAX - 1 bytes. */
    char *fits = repeat('p', CONF_STRMAX - 1, "prof_prefix:", "");
    char *toolong = repeat('p', CONF_STRMAX, "prof_prefix:", ",narenas:9");
    opts_reset();
    cr_assert_eq(conf_parse("t", fits, false), 0);
    cr_assert_eq(conf_parse("t", toolong, false), 1);
    cr_assert_eq(opt_narenas, 9);
    free(fits);
    free(toolong);
    /* Leading zeros are still a number, as long as the text is bounded. */
    opts_reset();
    cr_assert_eq(conf_parse("t", "narenas:0000000000000000000003", false), 0);
    cr_assert_eq(opt_narenas, 3);
}

/* Many pairs, generated with a known number of bad ones. */
static const char *good_seg[] = {"narenas:3", "tcache:false", "tcache:true", "tcache_max:4096",
                                 "tcache_max:0x800", "abort_conf:false", "narenas:0", "narenas:4096"};
static const char *bad_seg[] = {"narenas:x",  "narenas:-1",   "nope:1",     "garbage",
                                "tcache:no",  ":::",          ":v",         "k k:1",
                                "tcache_max:99999999999999999999999",       "narenas:1 2",
                                "abort_conf:", "tcache_max:0x", "\xff\x01:2", "a-b:1",
                                "narenas:4097", "tcache:true:false"};

static size_t gen_conf(uint64_t *seed, char *buf, size_t cap, unsigned *nbad)
{
    size_t len = 0;
    unsigned nseg = 1 + (unsigned)(tu_rand(seed) % 40);
    *nbad = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < nseg; i++) {
        const char *seg;
        if (tu_rand(seed) % 2) {
            seg = good_seg[tu_rand(seed) % MA_ARRAY_LEN(good_seg)];
        } else {
            seg = bad_seg[tu_rand(seed) % MA_ARRAY_LEN(bad_seg)];
            (*nbad)++;
        }
        size_t sl = strlen(seg);
        cr_assert_lt(len + sl + 2, cap);
        memcpy(buf + len, seg, sl);
        len += sl;
        if (i + 1 < nseg)
            buf[len++] = ',';
        buf[len] = '\0';
    }
    return len;
}

#define NFUZZ 3000

Test(conf_parse, generated_strings_count_exactly)
{
    uint64_t seed = 2024;
    char buf[4096];
    for (int i = 0; i < NFUZZ; i++) {
        unsigned want;
        gen_conf(&seed, buf, sizeof(buf), &want);
        opts_reset();
        unsigned got = conf_parse("t", buf, false);
        cr_assert_eq(got, want, "conf_parse(\"%s\") = %u, want %u", buf, got, want);
    }
}

Test(conf_parse, random_bytes_never_crash)
{
    uint64_t seed = 99;
    static const char alphabet[] = "narestcheb_:,:,0x19- \t\xff\x80";
    char buf[600];
    for (int i = 0; i < 20000; i++) {
        size_t n = tu_rand(&seed) % (sizeof(buf) - 1);
        for (size_t j = 0; j < n; j++) {
            uint64_t r = tu_rand(&seed);
            buf[j] = (r & 0x100) ? (char)(1 + r % 255) : alphabet[r % (sizeof(alphabet) - 1)];
        }
        buf[n] = '\0';
        opts_reset();
        unsigned bad = conf_parse("t", buf, false);
        /* At most one bad pair per comma-separated part. */
        unsigned parts = 1;
        for (size_t j = 0; j < n; j++)
            parts += buf[j] == ',';
        cr_assert_leq(bad, parts, "conf_parse(\"%s\") = %u for %u parts", buf, bad, parts);
    }
}

/* With report set: one line per bad pair, each "<myalloc>: <source>: ...",
 * bounded in length, naming the pair. */
typedef struct {
    const char *const *strs;
    size_t n;
} report_arg_t;

static void report_child(void *arg)
{
    report_arg_t *r = arg;
    for (size_t i = 0; i < r->n; i++)
        conf_parse("src", r->strs[i], true);
}

Test(conf_parse, reports_one_line_per_bad_pair)
{
    const char *strs[MA_ARRAY_LEN(cases) + 8];
    size_t n = 0;
    unsigned want = 0;
    for (size_t i = 0; i < MA_ARRAY_LEN(cases); i++) {
        strs[n++] = cases[i].s;
        want += cases[i].bad;
    }
    char *longkey = repeat('k', 5000, "", ":1");
    char *longval = repeat('9', 5000, "narenas:", ",tcache:x");
    strs[n++] = longkey;
    strs[n++] = longval;
    want += 1 + 2;
    static char err[1 << 20];
    report_arg_t r = {strs, n};
    int st = tu_capture(report_child, &r, err, sizeof(err));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
    static char *lines[4096];
    unsigned nl = split_lines(err, lines, 4096);
    cr_assert_eq(nl, want, "%u lines for %u bad pairs", nl, want);
    for (unsigned i = 0; i < nl; i++) {
        cr_assert(starts_with(lines[i], "<myalloc>: src: "), "\"%s\"", lines[i]);
        cr_assert_lt(strlen(lines[i]), 512, "line %u is %zu chars", i, strlen(lines[i]));
    }
    /* The unknown long key is named (at least its start). */
    bool seen = false;
    for (unsigned i = 0; i < nl; i++)
        seen |= strstr(lines[i], "kkkkkkkkkkkkkkkkkkkk") != NULL;
    cr_assert(seen, "the long unknown key is not named");
    free(longkey);
    free(longval);
}

Test(conf_parse, generated_strings_report_as_they_count)
{
    static char bufs[200][4096];
    const char *strs[200];
    unsigned want = 0;
    uint64_t seed = 7;
    for (int i = 0; i < 200; i++) {
        unsigned b;
        gen_conf(&seed, bufs[i], sizeof(bufs[i]), &b);
        strs[i] = bufs[i];
        want += b;
    }
    static char err[1 << 20];
    report_arg_t r = {strs, 200};
    int st = tu_capture(report_child, &r, err, sizeof(err));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    static char *lines[8192];
    unsigned nl = split_lines(err, lines, 8192);
    cr_assert_eq(nl, want);
}

Test(conf_parse, the_option_table)
{
    const char *names[] = {"abort_conf", "narenas", "tcache", "tcache_max"};
    for (size_t i = 0; i < MA_ARRAY_LEN(names); i++) {
        const conf_option_t *o = conf_find(names[i], strlen(names[i]));
        cr_assert_not_null(o, "option %s missing", names[i]);
        cr_assert_str_eq(o->name, names[i]);
    }
    cr_assert_null(conf_find("narena", 6));
    cr_assert_null(conf_find("narenasx", 8));
    cr_assert_null(conf_find("", 0));
    /* conf_find compares exactly len bytes. */
    cr_assert_not_null(conf_find("narenas:3", 7));
}
