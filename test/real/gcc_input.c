/*
 * gcc_input.c: the C file tools/check-real.sh compiles with gcc (once on the
 * system malloc, once on myalloc) before comparing the objects and running
 * the program. It is meant to give the compiler some work (structs, unions,
 * function pointers, inlining candidates, loops to vectorize, a switch to
 * turn into a table, macros, varargs) and to print a deterministic result.
 *
 * The program: a small expression language (tokenizer, recursive-descent
 * parser to an AST, evaluator with variables in a hash table), run over a
 * generated set of programs, plus a few numeric kernels.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL)
        die("out of memory (%zu bytes)", n);
    return p;
}

/* ---- strings ---------------------------------------------------------- */

typedef struct {
    char *s;
    size_t len, cap;
} strbuf;

static void sb_putc(strbuf *b, char c)
{
    if (b->len + 2 > b->cap) {
        b->cap = b->cap ? b->cap * 2 : 16;
        b->s = realloc(b->s, b->cap);
        if (b->s == NULL)
            die("out of memory");
    }
    b->s[b->len++] = c;
    b->s[b->len] = '\0';
}

static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    for (int i = 0; i < n && i < (int)sizeof(tmp) - 1; i++)
        sb_putc(b, tmp[i]);
}

/* ---- tokens ----------------------------------------------------------- */

enum tok_kind { T_NUM, T_IDENT, T_OP, T_LPAREN, T_RPAREN, T_ASSIGN, T_SEMI, T_EOF };

typedef struct {
    enum tok_kind kind;
    long long num;
    char text[32];
    char op;
} token;

typedef struct {
    const char *p;
    token cur;
} lexer;

static void lex_next(lexer *lx)
{
    while (isspace((unsigned char)*lx->p))
        lx->p++;
    token *t = &lx->cur;
    memset(t, 0, sizeof(*t));
    char c = *lx->p;
    if (c == '\0') {
        t->kind = T_EOF;
    } else if (isdigit((unsigned char)c)) {
        t->kind = T_NUM;
        while (isdigit((unsigned char)*lx->p))
            t->num = t->num * 10 + (*lx->p++ - '0');
    } else if (isalpha((unsigned char)c) || c == '_') {
        t->kind = T_IDENT;
        size_t n = 0;
        while (isalnum((unsigned char)*lx->p) || *lx->p == '_') {
            if (n < sizeof(t->text) - 1)
                t->text[n++] = *lx->p;
            lx->p++;
        }
    } else {
        lx->p++;
        switch (c) {
        case '(': t->kind = T_LPAREN; break;
        case ')': t->kind = T_RPAREN; break;
        case '=': t->kind = T_ASSIGN; break;
        case ';': t->kind = T_SEMI; break;
        case '+': case '-': case '*': case '/': case '%': case '^': case '&': case '|':
            t->kind = T_OP;
            t->op = c;
            break;
        default: die("bad character '%c'", c);
        }
    }
}

/* ---- AST -------------------------------------------------------------- */

typedef struct node node;
struct node {
    enum { N_NUM, N_VAR, N_BIN, N_NEG, N_CALL } kind;
    union {
        long long num;
        char name[32];
        struct {
            char op;
            node *l, *r;
        } bin;
        node *operand;
        struct {
            char fn[32];
            node *arg;
        } call;
    } u;
};

static node *new_node(int kind)
{
    node *n = xmalloc(sizeof(*n));
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    return n;
}

static void free_node(node *n)
{
    if (n == NULL)
        return;
    switch (n->kind) {
    case N_BIN: free_node(n->u.bin.l); free_node(n->u.bin.r); break;
    case N_NEG: free_node(n->u.operand); break;
    case N_CALL: free_node(n->u.call.arg); break;
    default: break;
    }
    free(n);
}

static node *parse_expr(lexer *lx, int min_prec);

static int prec(char op)
{
    switch (op) {
    case '|': return 1;
    case '^': return 2;
    case '&': return 3;
    case '+': case '-': return 4;
    case '*': case '/': case '%': return 5;
    default: return 0;
    }
}

static node *parse_primary(lexer *lx)
{
    token t = lx->cur;
    if (t.kind == T_NUM) {
        lex_next(lx);
        node *n = new_node(N_NUM);
        n->u.num = t.num;
        return n;
    }
    if (t.kind == T_IDENT) {
        lex_next(lx);
        if (lx->cur.kind == T_LPAREN) {
            lex_next(lx);
            node *n = new_node(N_CALL);
            memcpy(n->u.call.fn, t.text, sizeof(t.text));
            n->u.call.arg = parse_expr(lx, 1);
            if (lx->cur.kind != T_RPAREN)
                die("expected )");
            lex_next(lx);
            return n;
        }
        node *n = new_node(N_VAR);
        memcpy(n->u.name, t.text, sizeof(t.text));
        return n;
    }
    if (t.kind == T_LPAREN) {
        lex_next(lx);
        node *n = parse_expr(lx, 1);
        if (lx->cur.kind != T_RPAREN)
            die("expected )");
        lex_next(lx);
        return n;
    }
    if (t.kind == T_OP && t.op == '-') {
        lex_next(lx);
        node *n = new_node(N_NEG);
        n->u.operand = parse_primary(lx);
        return n;
    }
    die("unexpected token");
    return NULL;
}

static node *parse_expr(lexer *lx, int min_prec)
{
    node *l = parse_primary(lx);
    while (lx->cur.kind == T_OP && prec(lx->cur.op) >= min_prec) {
        char op = lx->cur.op;
        lex_next(lx);
        node *r = parse_expr(lx, prec(op) + 1);
        node *b = new_node(N_BIN);
        b->u.bin.op = op;
        b->u.bin.l = l;
        b->u.bin.r = r;
        l = b;
    }
    return l;
}

/* ---- variables: open hashing ------------------------------------------ */

typedef struct var {
    struct var *next;
    long long value;
    char name[];
} var;

typedef struct {
    var **slots;
    size_t nslots, count;
} vartab;

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

static var *vt_find(vartab *t, const char *name, int create)
{
    if (t->nslots == 0) {
        t->nslots = 8;
        t->slots = calloc(t->nslots, sizeof(var *));
    }
    size_t i = hash_name(name) & (t->nslots - 1);
    for (var *v = t->slots[i]; v; v = v->next)
        if (strcmp(v->name, name) == 0)
            return v;
    if (!create)
        return NULL;
    if (t->count + 1 > t->nslots * 3 / 4) {
        size_t nn = t->nslots * 2;
        var **ns = calloc(nn, sizeof(var *));
        for (size_t k = 0; k < t->nslots; k++) {
            var *v = t->slots[k];
            while (v) {
                var *next = v->next;
                size_t j = hash_name(v->name) & (nn - 1);
                v->next = ns[j];
                ns[j] = v;
                v = next;
            }
        }
        free(t->slots);
        t->slots = ns;
        t->nslots = nn;
        i = hash_name(name) & (nn - 1);
    }
    size_t len = strlen(name);
    var *v = xmalloc(sizeof(var) + len + 1);
    memcpy(v->name, name, len + 1);
    v->value = 0;
    v->next = t->slots[i];
    t->slots[i] = v;
    t->count++;
    return v;
}

static void vt_free(vartab *t)
{
    for (size_t k = 0; k < t->nslots; k++) {
        var *v = t->slots[k];
        while (v) {
            var *next = v->next;
            free(v);
            v = next;
        }
    }
    free(t->slots);
    t->slots = NULL;
    t->nslots = t->count = 0;
}

/* ---- evaluation ------------------------------------------------------- */

typedef long long (*builtin_fn)(long long);

static long long fn_sq(long long x) { return x * x; }
static long long fn_abs(long long x) { return x < 0 ? -x : x; }
static long long fn_popc(long long x) { return __builtin_popcountll((unsigned long long)x); }
static long long fn_fib(long long x)
{
    long long a = 0, b = 1;
    for (long long i = 0; i < (x & 63); i++) {
        long long t = a + b;
        a = b;
        b = t;
    }
    return a;
}

static const struct {
    const char *name;
    builtin_fn fn;
} builtins[] = {{"sq", fn_sq}, {"abs", fn_abs}, {"popc", fn_popc}, {"fib", fn_fib}};

static long long eval(const node *n, vartab *vars)
{
    switch (n->kind) {
    case N_NUM: return n->u.num;
    case N_VAR: {
        var *v = vt_find(vars, n->u.name, 0);
        return v ? v->value : 0;
    }
    case N_NEG: return -eval(n->u.operand, vars);
    case N_CALL:
        for (size_t i = 0; i < ARRAY_LEN(builtins); i++)
            if (strcmp(builtins[i].name, n->u.call.fn) == 0)
                return builtins[i].fn(eval(n->u.call.arg, vars));
        die("unknown function %s", n->u.call.fn);
        return 0;
    case N_BIN: {
        long long a = eval(n->u.bin.l, vars), b = eval(n->u.bin.r, vars);
        switch (n->u.bin.op) {
        case '+': return (long long)((unsigned long long)a + (unsigned long long)b);
        case '-': return (long long)((unsigned long long)a - (unsigned long long)b);
        case '*': return (long long)((unsigned long long)a * (unsigned long long)b);
        case '/': return b == 0 ? 0 : (b == -1 ? -a : a / b);
        case '%': return b == 0 ? 0 : (b == -1 ? 0 : a % b);
        case '^': return a ^ b;
        case '&': return a & b;
        case '|': return a | b;
        }
    }
    }
    return 0;
}

/* Run "name = expr; name = expr; ...": returns a checksum of the values. */
static unsigned long long run_program(const char *src, vartab *vars, size_t *nstmts)
{
    lexer lx = {src, {0}};
    unsigned long long sum = 0;
    lex_next(&lx);
    while (lx.cur.kind != T_EOF) {
        if (lx.cur.kind != T_IDENT)
            die("expected a name");
        char name[32];
        memcpy(name, lx.cur.text, sizeof(name));
        lex_next(&lx);
        if (lx.cur.kind != T_ASSIGN)
            die("expected =");
        lex_next(&lx);
        node *e = parse_expr(&lx, 1);
        long long v = eval(e, vars);
        free_node(e);
        vt_find(vars, name, 1)->value = v;
        sum = sum * 1000003u + (unsigned long long)v;
        (*nstmts)++;
        if (lx.cur.kind == T_SEMI)
            lex_next(&lx);
    }
    return sum;
}

/* ---- program generator ------------------------------------------------ */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void gen_expr(strbuf *b, int depth)
{
    static const char ops[] = "+-*/%^&|";
    int r = (int)(rng() % 10);
    if (depth <= 0 || r < 3) {
        if (rng() % 2)
            sb_printf(b, "%llu", (unsigned long long)(rng() % 1000));
        else
            sb_printf(b, "v%u", (unsigned)(rng() % 40));
    } else if (r < 5) {
        static const char *fns[] = {"sq", "abs", "popc", "fib"};
        sb_printf(b, "%s(", fns[rng() % 4]);
        gen_expr(b, depth - 1);
        sb_putc(b, ')');
    } else if (r == 5) {
        sb_printf(b, "-(");
        gen_expr(b, depth - 1);
        sb_putc(b, ')');
    } else {
        sb_putc(b, '(');
        gen_expr(b, depth - 1);
        sb_printf(b, " %c ", ops[rng() % 8]);
        gen_expr(b, depth - 1);
        sb_putc(b, ')');
    }
}

/* ---- numeric kernels (loops for the vectorizer) ----------------------- */

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void saxpy(float *y, const float *x, float a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}

static int cmp_ull(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    enum { NPROG = 400 };
    unsigned long long *sums = xmalloc(NPROG * sizeof(*sums));
    size_t stmts = 0, bytes = 0;
    vartab vars = {0};
    for (int p = 0; p < NPROG; p++) {
        strbuf b = {0};
        int n = 5 + (int)(rng() % 30);
        for (int i = 0; i < n; i++) {
            sb_printf(&b, "v%u = ", (unsigned)(rng() % 40));
            gen_expr(&b, 1 + (int)(rng() % 7));
            sb_printf(&b, ";\n");
        }
        bytes += b.len;
        sums[p] = run_program(b.s, &vars, &stmts);
        free(b.s);
        if (p % 50 == 49)
            vt_free(&vars);
    }
    vt_free(&vars);
    qsort(sums, NPROG, sizeof(*sums), cmp_ull);
    unsigned long long h = 0;
    for (int p = 0; p < NPROG; p++)
        h = h * 31 + sums[p];
    printf("programs=%d statements=%zu source_bytes=%zu checksum=%016llx\n", NPROG, stmts, bytes, h);
    printf("smallest=%llu largest=%llu\n", sums[0], sums[NPROG - 1]);
    free(sums);

    size_t n = 4096;
    double *a = xmalloc(n * sizeof(double)), *c = xmalloc(n * sizeof(double));
    float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        a[i] = (double)(i % 17) / 7.0;
        c[i] = (double)(i % 13) / 3.0;
        x[i] = (float)(i % 11);
        y[i] = (float)(i % 5);
    }
    for (int k = 0; k < 10; k++)
        saxpy(y, x, 0.5f, n);
    double fs = 0;
    for (size_t i = 0; i < n; i++)
        fs += y[i];
    printf("dot=%.6f saxpy_sum=%.1f min=%d max=%d\n", dot(a, c, n), fs, MIN(3, 7), MAX(3, 7));
    free(a);
    free(c);
    free(x);
    free(y);
    return 0;
}
