/*
 * prof_flame: folded stacks and an SVG flame graph of the live heap.
 *
 * Folded (prof_format:folded), one line per stack, root first:
 *
 *   main;handle_request;parse_json 13888
 *
 * the value being the stack's unbiased live bytes (sum over its size
 * classes of count * w * usize), rounded; flamegraph.pl, speedscope and
 * inferno read it. ';' inside a name is written as ':'.
 *
 * SVG (prof_format:svg): the same stacks merged into a tree by function
 * name, drawn as a flame graph (root at the bottom, children in name
 * order, width proportional to live bytes). Self-contained: plain SVG with
 * no script or external reference, so any browser opens it; a frame's
 * label is its name, and its size when there is room; its tooltip
 * (<title>) gives name, bytes, share and resident bytes.
 */
#include <errno.h>
#include <string.h>

#include "prof_out.h"

static void put_name(ma_bufwriter_t *bw, const char *s)
{
    char buf[256];
    size_t n = 0;
    for (; *s; s++) {
        char c = *s == ';' ? ':' : (*s == '\n' || *s == '\r') ? ' ' : *s;
        buf[n++] = c;
        if (n == sizeof(buf)) {
            ma_bw_write(bw, buf, n);
            n = 0;
        }
    }
    ma_bw_write(bw, buf, n);
}

/* A stack's unbiased live bytes and resident bytes over its records
 * [i, j); returns j. */
static size_t stack_group(const prof_snap_t *snap, size_t i, double *bytes, double *resident)
{
    size_t j = i;
    *bytes = *resident = 0;
    while (j < snap->nrecs && snap->recs[j].stack == snap->recs[i].stack) {
        const prof_snap_rec_t *r = &snap->recs[j];
        double w = prof_snap_w(r);
        *bytes += (double)r->live * w * (double)sc_index2size(r->szind);
        *resident += (double)r->resident * w;
        j++;
    }
    return j;
}

int prof_write_folded(int fd, prof_snap_t *snap)
{
    prof_frames_t frames;
    if (!prof_frames_build(snap, &frames))
        return ENOMEM;
    ma_bufwriter_t *bw = prof_scratch_alloc(snap->sc, sizeof(*bw));
    if (bw == NULL)
        return ENOMEM;
    ma_bw_init_fd(bw, fd);
    for (size_t i = 0; i < snap->nrecs;) {
        double bytes, resident;
        const prof_stack_t *s = snap->recs[i].stack;
        i = stack_group(snap, i, &bytes, &resident);
        long long v = ma_llround(bytes);
        if (v <= 0)
            continue;
        if (s->depth == 0)
            ma_bw_puts(bw, "[unknown]");
        for (uint32_t k = s->depth; k-- > 0;) {
            const prof_frame_t *fr = prof_frames_get(&frames, (uint64_t)(uintptr_t)s->frames[k]);
            put_name(bw, fr != NULL ? fr->name : "?");
            if (k > 0)
                ma_bw_write(bw, ";", 1);
        }
        ma_bw_printf(bw, " %lld\n", v);
    }
    if (!ma_bw_flush(bw))
        return errno != 0 ? errno : EIO;
    return 0;
}

/* ---------------------------------------------------------------------
 * SVG.
 */

typedef struct fnode {
    uint32_t parent;     /* node index; the root is 0 and its own parent */
    uint32_t name;       /* name id (index into names); the root's is unused */
    uint32_t first, nkids; /* children: order[first .. first + nkids) */
    uint32_t depth;
    double value, resident;
    double x;            /* left edge, in bytes from the graph's left */
} fnode_t;

typedef struct flame {
    prof_snap_t *snap;
    prof_frames_t frames;
    /* Names: distinct frame names; name_of_frame maps frame index -> id. */
    const char **names;
    uint32_t nnames, *name_of_frame, *name_slots;
    size_t name_mask;
    fnode_t *nodes;
    uint32_t nnodes, maxdepth;
    uint32_t *node_slots; /* (parent, name) -> node index + 1 */
    size_t node_mask;
    uint32_t *order;      /* node indices grouped by parent, in name order */
} flame_t;

static uint32_t name_id(flame_t *f, const char *name)
{
    size_t len = strlen(name);
    size_t h = (size_t)prof_hash_bytes(name, len, 7) & f->name_mask;
    while (f->name_slots[h] != 0) {
        const char *x = f->names[f->name_slots[h] - 1];
        if (strcmp(x, name) == 0)
            return f->name_slots[h] - 1;
        h = (h + 1) & f->name_mask;
    }
    f->names[f->nnames] = name;
    f->name_slots[h] = ++f->nnames;
    return f->nnames - 1;
}

static uint32_t node_child(flame_t *f, uint32_t parent, uint32_t name)
{
    uint64_t key[2] = {parent, name};
    size_t h = (size_t)prof_hash_bytes(key, sizeof(key), 3) & f->node_mask;
    while (f->node_slots[h] != 0) {
        fnode_t *n = &f->nodes[f->node_slots[h] - 1];
        if (n->parent == parent && n->name == name)
            return f->node_slots[h] - 1;
        h = (h + 1) & f->node_mask;
    }
    uint32_t id = f->nnodes++;
    fnode_t *n = &f->nodes[id];
    n->parent = parent;
    n->name = name;
    n->depth = f->nodes[parent].depth + 1;
    if (n->depth > f->maxdepth)
        f->maxdepth = n->depth;
    f->node_slots[h] = id + 1;
    return id;
}

static int order_cmp(const void *a, const void *b, void *ctx)
{
    const flame_t *f = ctx;
    const fnode_t *x = &f->nodes[*(const uint32_t *)a], *y = &f->nodes[*(const uint32_t *)b];
    if (x->parent != y->parent)
        return x->parent < y->parent ? -1 : 1;
    return strcmp(f->names[x->name], f->names[y->name]);
}

static bool flame_build(flame_t *f)
{
    prof_snap_t *snap = f->snap;
    if (!prof_frames_build(snap, &f->frames))
        return false;
    size_t nf = f->frames.n, total = 1;
    for (size_t i = 0; i < snap->nrecs; i++)
        if (i == 0 || snap->recs[i].stack != snap->recs[i - 1].stack)
            total += snap->recs[i].stack->depth;
    size_t ns = 64, nn = 64;
    while (ns < 2 * nf)
        ns *= 2;
    while (nn < 2 * total)
        nn *= 2;
    f->name_mask = ns - 1;
    f->node_mask = nn - 1;
    f->names = prof_scratch_alloc(snap->sc, (nf + 1) * sizeof(char *));
    f->name_of_frame = prof_scratch_alloc(snap->sc, (nf + 1) * sizeof(uint32_t));
    f->name_slots = prof_scratch_alloc(snap->sc, ns * sizeof(uint32_t));
    f->nodes = prof_scratch_alloc(snap->sc, total * sizeof(fnode_t));
    f->node_slots = prof_scratch_alloc(snap->sc, nn * sizeof(uint32_t));
    f->order = prof_scratch_alloc(snap->sc, total * sizeof(uint32_t));
    if (f->names == NULL || f->name_of_frame == NULL || f->name_slots == NULL || f->nodes == NULL ||
        f->node_slots == NULL || f->order == NULL)
        return false;
    for (size_t i = 0; i < nf; i++)
        f->name_of_frame[i] = name_id(f, f->frames.v[i].name);
    f->nnodes = 1; /* the root */
    for (size_t i = 0; i < snap->nrecs;) {
        double bytes, resident;
        const prof_stack_t *s = snap->recs[i].stack;
        i = stack_group(snap, i, &bytes, &resident);
        if (bytes <= 0)
            continue;
        uint32_t node = 0;
        f->nodes[0].value += bytes;
        f->nodes[0].resident += resident;
        for (uint32_t k = s->depth; k-- > 0;) {
            const prof_frame_t *fr = prof_frames_get(&f->frames, (uint64_t)(uintptr_t)s->frames[k]);
            if (fr == NULL)
                continue;
            node = node_child(f, node, f->name_of_frame[fr->index]);
            f->nodes[node].value += bytes;
            f->nodes[node].resident += resident;
        }
    }
    /* Children of each node adjacent in name order, then left edges. */
    for (uint32_t i = 1; i < f->nnodes; i++)
        f->order[i - 1] = i;
    prof_sort(f->order, f->nnodes - 1, sizeof(uint32_t), order_cmp, f);
    for (uint32_t k = 0; k < f->nnodes - 1; k++) {
        fnode_t *p = &f->nodes[f->nodes[f->order[k]].parent];
        if (p->nkids++ == 0)
            p->first = k;
    }
    /* A child is created after its parent, so its index is larger:
     * walking nodes by index places every parent before its children. */
    for (uint32_t i = 0; i < f->nnodes; i++) {
        fnode_t *n = &f->nodes[i];
        double x = n->x;
        for (uint32_t c = 0; c < n->nkids; c++) {
            fnode_t *kid = &f->nodes[f->order[n->first + c]];
            kid->x = x;
            x += kid->value;
        }
    }
    return true;
}

static void xml_text(ma_bufwriter_t *bw, const char *s, size_t max)
{
    for (size_t i = 0; s[i] != '\0' && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '&':
            ma_bw_puts(bw, "&amp;");
            break;
        case '<':
            ma_bw_puts(bw, "&lt;");
            break;
        case '>':
            ma_bw_puts(bw, "&gt;");
            break;
        case '"':
            ma_bw_puts(bw, "&quot;");
            break;
        case '\'':
            ma_bw_puts(bw, "&apos;");
            break;
        default: {
            char ch = c < 0x20 || c >= 0x7f ? '?' : (char)c;
            ma_bw_write(bw, &ch, 1);
        }
        }
    }
}

/* "12.3 MiB" */
static void human_bytes(char *buf, size_t len, double b)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    while (b >= 1024 && u + 1 < MA_ARRAY_LEN(units)) {
        b /= 1024;
        u++;
    }
    if (u == 0)
        ma_snprintf(buf, len, "%.0f B", b);
    else
        ma_snprintf(buf, len, "%.1f %s", b, units[u]);
}

#define SVG_WIDTH 1200.0
#define SVG_PAD 10.0
#define SVG_FRAME 16.0
#define SVG_TOP 56.0
#define SVG_BOTTOM 24.0
#define SVG_CHAR 7.2 /* width of a 12px monospace character */

static void svg_node(ma_bufwriter_t *bw, const flame_t *f, uint32_t i, double scale, double height)
{
    const fnode_t *n = &f->nodes[i];
    double w = n->value * scale;
    double x = SVG_PAD + n->x * scale, y = height - SVG_BOTTOM - (double)(n->depth + 1) * SVG_FRAME;
    const char *name = i == 0 ? "all (live heap)" : f->names[n->name];
    uint64_t h = prof_hash_bytes(name, strlen(name), 11);
    unsigned r = 205 + (unsigned)(h % 50), g = (unsigned)((h >> 8) % 230), b = (unsigned)((h >> 16) % 55);
    char vb[32], rb[32];
    human_bytes(vb, sizeof(vb), n->value);
    double pct = f->nodes[0].value > 0 ? 100.0 * n->value / f->nodes[0].value : 0;
    ma_bw_puts(bw, "<g><title>");
    xml_text(bw, name, 4096);
    ma_bw_printf(bw, " (%s, %.0f bytes, %.2f%%", vb, n->value, pct);
    if (f->snap->resid) {
        human_bytes(rb, sizeof(rb), n->resident);
        ma_bw_printf(bw, "; %s resident", rb);
    }
    ma_bw_printf(bw, ")</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"rgb(%u,%u,%u)\" "
                     "rx=\"2\" ry=\"2\"/>",
                 x, y, w, SVG_FRAME - 1, r, g, b);
    size_t fits = w > 6 ? (size_t)((w - 6) / SVG_CHAR) : 0;
    if (fits >= 3) {
        size_t len = strlen(name);
        ma_bw_printf(bw, "<text x=\"%.1f\" y=\"%.1f\">", x + 3, y + 11.5);
        if (len + 3 + strlen(vb) <= fits) {
            /* Room for the size too: readable without hovering. */
            xml_text(bw, name, len);
            ma_bw_printf(bw, " (%s)", vb);
        } else if (len <= fits) {
            xml_text(bw, name, len);
        } else {
            xml_text(bw, name, fits - 2);
            ma_bw_puts(bw, "..");
        }
        ma_bw_puts(bw, "</text>");
    }
    ma_bw_puts(bw, "</g>\n");
}

int prof_write_svg(int fd, prof_snap_t *snap)
{
    flame_t f;
    memset(&f, 0, sizeof(f));
    f.snap = snap;
    ma_bufwriter_t *bw = prof_scratch_alloc(snap->sc, sizeof(*bw));
    if (bw == NULL || !flame_build(&f))
        return ENOMEM;
    ma_bw_init_fd(bw, fd);
    double height = SVG_TOP + SVG_BOTTOM + (double)(f.maxdepth + 1) * SVG_FRAME;
    double total = f.nodes[0].value;
    double scale = total > 0 ? (SVG_WIDTH - 2 * SVG_PAD) / total : 0;
    uint64_t samples = 0;
    for (size_t i = 0; i < snap->nrecs; i++)
        samples += snap->recs[i].live;
    char tb[32], rb[32], R[32];
    human_bytes(tb, sizeof(tb), total);
    human_bytes(R, sizeof(R), (double)((uint64_t)1 << snap->lg_now));
    const char *what = snap->peak ? "Peak heap" : "Live heap";
    ma_bw_printf(bw,
                 "<?xml version=\"1.0\" standalone=\"no\"?>\n"
                 "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                 "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\" font-size=\"12\">\n"
                 "<title>myalloc: %s flame graph</title>\n"
                 "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f8f0\"/>\n"
                 "<text x=\"%.0f\" y=\"24\" font-size=\"17\" text-anchor=\"middle\">%s: %s (unbiased)</text>\n",
                 SVG_WIDTH, height, SVG_WIDTH, height, what, SVG_WIDTH / 2, what, tb);
    ma_bw_printf(bw,
                 "<text x=\"%.0f\" y=\"42\" text-anchor=\"middle\" fill=\"#555\">estimated from %llu samples, "
                 "one per %s allocated on average; width = live bytes, hover for numbers",
                 SVG_WIDTH / 2, (unsigned long long)samples, R);
    if (snap->resid) {
        double res = 0;
        for (size_t i = 0; i < snap->nrecs; i++)
            res += (double)snap->recs[i].resident * prof_snap_w(&snap->recs[i]);
        human_bytes(rb, sizeof(rb), res);
        ma_bw_printf(bw, "; %s resident", rb);
    }
    ma_bw_puts(bw, "</text>\n");
    if (total > 0) {
        for (uint32_t i = 0; i < f.nnodes; i++)
            if (f.nodes[i].value * scale >= 0.1)
                svg_node(bw, &f, i, scale, height);
    } else {
        ma_bw_printf(bw, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">no live sampled memory</text>\n",
                     SVG_WIDTH / 2, height - SVG_BOTTOM - 4);
    }
    ma_bw_puts(bw, "</svg>\n");
    if (!ma_bw_flush(bw))
        return errno != 0 ? errno : EIO;
    return 0;
}
