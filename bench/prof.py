#!/usr/bin/env python3
"""What the heap profiler costs (make bench-prof): CPU overhead at the
default rate, cost per sample, memory per live sampled object, for myalloc
and for jemalloc measured the same way.

Called by bench/prof.sh (which builds the programs, the frame-pointer
build of bench/src/prof.c and finds jemalloc); see "Profiler" in
bench/README.md for what each number is and how it is measured. Reuses the
formatting and probe helpers of bench.py. Standard library only.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import time

import bench as B  # bench/bench.py: run_program, probe, table, fmt_num, machine, git_commit

LG_COST = 12  # lg_prof_sample of the cost-per-sample runs
SIZE_LIVE = 64  # object size of the memory runs

# The myalloc runs of programs other than prof print their statistics at
# exit (after the timed region) for "prof.nsamples"; the prof-off runs do
# the same so that both sides run the same configuration apart from prof.
MY_STATS = "stats_print:true,stats_print_opts:ma"


class Row:
    """One workload of the overhead table."""

    def __init__(self, name, threads, argv, desc):
        self.name = name
        self.threads = str(threads)
        self.argv = [str(a) for a in argv]
        self.desc = desc

    @property
    def key(self):
        return f"prof-overhead/{self.name}/{self.threads}"


def overhead_rows(scale):
    def n(x):
        return max(1, int(x * scale))

    return [
        Row("rand-16-72", 1, ["prof", "pairs", n(20_000_000), 16, 72],
            "malloc+free pairs, random sizes 16-72 B (the cost-per-sample workload)"),
        Row("batch-mixed", 1, ["batch", "mixed", 0, n(12_000)],
            "1000 mallocs then 1000 frees, 16 B-4 KiB (as in make bench)"),
        Row("larson-1k", 1, ["larson", 1, 16, 1024, 1000, n(6_000_000)],
            "Larson-like, 16 B-1 KiB (as in make bench)"),
        Row("larson-1k", 2, ["larson", 2, 16, 1024, 1000, n(6_000_000) // 2],
            "Larson-like, 16 B-1 KiB, cross-thread frees"),
        Row("larson-32k", 1, ["larson", 1, 16, 32768, 1000, n(1_000_000)],
            "Larson-like, 16 B-32 KiB"),
    ]


# --------------------------------------------------------------------------
# Running


def run_one(bindir, argv, lib, conf, timeout, log_dir, tag):
    """Run argv[0] (a program in bindir) once with LD_PRELOAD=lib and the
    given environment (MYALLOC_CONF / MALLOC_CONF). Returns the RESULT values
    (and "stats_nsamples" from a myalloc statistics print) or {"fail": why}."""
    cmd = [os.path.join(bindir, argv[0])] + argv[1:]

    def rejected(err):
        conf_err = [l for l in err.splitlines() if l.startswith(("<myalloc>:", "<jemalloc>:"))]
        return "option rejected: " + conf_err[0][:120] if conf_err else None

    def nsamples(res, err):
        ms = re.findall(r"^\s*prof\.nsamples:\s*(\d+)", err, re.M)
        if ms:
            res["stats_nsamples"] = float(ms[-1])
        return None

    res = B.run_program(cmd, dict(conf, **({"LD_PRELOAD": lib} if lib else {})), timeout,
                        os.path.join(log_dir, f"prof-{tag}.log"),
                        f"command: {' '.join(cmd)}\nLD_PRELOAD={lib}\nconf: {conf}\n",
                        clear=("LD_PRELOAD", "MYALLOC_CONF", "MALLOC_CONF"), reject=rejected, check=nsamples)
    res["cmd"] = " ".join(f"{k}={v}" for k, v in conf.items()) + \
        (f" LD_PRELOAD={lib}" if lib else "") + " " + " ".join(cmd)
    return res


def cpu_s(r):
    return r["user_s"] + r["sys_s"]


def samples_of(r):
    """myalloc's sample count of a run: the program's own (timed loop only)
    when it reports one, else the statistics print at exit."""
    if r.get("nsamples", -1) >= 0:
        return r["nsamples"]
    return r.get("stats_nsamples")


def check_conf(r, prof_on, lg=None):
    """The prof program reports opt.prof and prof.lg_sample: check that the
    options took effect. Returns a failure reason or None."""
    if "opt_prof" not in r:
        return None  # a program without the report (larson, batch)
    if int(r["opt_prof"]) != int(prof_on):
        return f"opt.prof is {int(r['opt_prof'])}, expected {int(prof_on)}"
    if prof_on and lg is not None and int(r.get("lg_sample", -1)) != lg:
        return f"prof.lg_sample is {r.get('lg_sample')}, expected {lg}"
    return None


class Cell:
    """Repeated paired runs of one configuration (prof off / prof on)."""

    def __init__(self, label):
        self.label = label
        self.off = []
        self.on = []
        self.fail = None  # (reason, result)
        self.skip = None

    def ok(self):
        return self.fail is None and self.skip is None and self.on and self.off

    def status(self):
        if self.skip:
            return "skipped"
        if self.fail:
            return f"FAIL ({self.fail[0]})"
        return None


def med(xs):
    return statistics.median(xs) if xs else None


def spread(xs, f=lambda v: B.fmt_num(v)):
    return f"[{f(min(xs))}, {f(max(xs))}]" if xs else "-"


def pct(v):
    return "-" if v is None else f"{v * 100:+.1f}%"


# --------------------------------------------------------------------------
# The three measurements


def run_pair(cell, runner, off, on, rep):
    """Run the off and on configurations back to back (order alternating
    with the repetition); a failure stops the cell."""
    order = [("off", off), ("on", on)]
    if rep % 2:
        order.reverse()
    got = {}
    for side, (argv, lib, conf, checks) in order:
        if cell.fail:
            return None
        r = runner(argv, lib, conf, f"{cell.label}-{side}")
        why = r.get("fail") or check_conf(r, *checks)
        if why:
            cell.fail = (why, r)
            return None
        got[side] = r
    cell.off.append(got["off"])
    cell.on.append(got["on"])
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--fp-bin", required=True, help="prof built with -fno-omit-frame-pointer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--myalloc", required=True)
    ap.add_argument("--jemalloc", default="")
    ap.add_argument("--jemalloc-skip", default="")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()

    quick = os.environ.get("BENCH_QUICK", "0") not in ("", "0")
    reps = int(os.environ.get("BENCH_REPS", "3" if quick else "7"))
    oreps = 2 * reps + 1  # the overhead is the smallest effect: more pairs
    scale = float(os.environ.get("BENCH_SCALE", "0.25" if quick else "1"))
    timeout = float(os.environ.get("BENCH_TIMEOUT", "60" if quick else "120"))
    filt = os.environ.get("BENCH_FILTER", "")
    n_cost = max(1000, int(20_000_000 * scale))
    n_live = max(100, int(20_000 * scale))

    rows = overhead_rows(scale)
    cost_key = f"prof-cost/lg{LG_COST}"
    mem_key = f"prof-memory/{SIZE_LIVE}B"
    keys = [r.key for r in rows] + [cost_key, mem_key]
    if filt:
        rx = re.compile(filt)
        rows = [r for r in rows if rx.search(r.key)]
        keys = [k for k in keys if rx.search(k)]
    if args.list:
        for r in rows:
            print(f"{r.key:32} {' '.join(r.argv)}")
        if cost_key in keys:
            print(f"{cost_key:32} prof pairs {n_cost} 16 72 (and prof-fp)")
        if mem_key in keys:
            print(f"{mem_key:32} prof live {n_live} {SIZE_LIVE}")
        return 0
    if not keys:
        print(f"bench-prof: no case matches BENCH_FILTER={filt!r}; nothing to do",
              file=sys.stderr)
        return 0

    my = args.myalloc
    je = args.jemalloc or None
    je_skip = args.jemalloc_skip or ("not found" if not je else None)
    for name, lib in (("myalloc", my), ("jemalloc", je)):
        if lib:
            why = B.probe(args.bin, (name, lib))
            if why:
                print(f"bench-prof: {name}: {why}", file=sys.stderr)
                if name == "myalloc":
                    return 1
                je, je_skip = None, why
    log_dir = os.path.join(args.out, "logs")
    # Smoke test of the sampled path before spending minutes on it.
    for name, lib, conf in (("myalloc", my, {"MYALLOC_CONF": "prof:true,lg_prof_sample:0"}),
                            ("jemalloc", je, {"MALLOC_CONF": "prof:true,lg_prof_sample:0"})):
        if not lib:
            continue
        r = run_one(args.bin, ["prof", "pairs", "2000", "16", "72"], lib, conf, 60, log_dir,
                    f"smoke-{name}")
        why = r.get("fail") or check_conf(r, True, 0)
        if why:
            print(f"bench-prof: {name} fails with every allocation sampled: {why}"
                  f"{' (log: ' + r['log'] + ')' if 'log' in r else ''}", file=sys.stderr)
            if name == "myalloc":
                return 1
            je, je_skip = None, f"fails with prof:true: {why}"
    if os.path.isdir(log_dir):
        for f in os.listdir(log_dir):
            if f.startswith("prof-") and f.endswith(".log"):
                os.unlink(os.path.join(log_dir, f))

    def runner_for(bindir):
        return lambda argv, lib, conf, tag: run_one(bindir, argv, lib, conf, timeout, log_dir, tag)

    run_bin, run_fp = runner_for(args.bin), runner_for(args.fp_bin)
    load0 = open("/proc/loadavg").read().split()[:3]
    t_start = time.monotonic()

    def progress(what, parts):
        print(f"[{time.monotonic() - t_start:5.0f}s] {what:34} {' '.join(parts)}",
              file=sys.stderr, flush=True)

    allocs = [("myalloc", my, "MYALLOC_CONF"), ("jemalloc", je, "MALLOC_CONF")]

    # ---- 1. overhead at the default rate --------------------------------
    over = {r.key: {a: Cell(f"{r.name}-{r.threads}-{a}") for a, _, _ in allocs} for r in rows}
    if not je:
        for r in rows:
            over[r.key]["jemalloc"].skip = je_skip
    if rows:
        print(f"bench-prof: overhead, {len(rows)} workloads x 2 allocators x {oreps} "
              f"paired repetitions{' (quick)' if quick else ''}", file=sys.stderr)
    for rep in range(oreps):
        order = allocs if rep % 2 == 0 else allocs[::-1]
        for r in rows:
            parts = []
            for name, lib, var in order:
                cell = over[r.key][name]
                if cell.skip or cell.fail:
                    continue
                extra = MY_STATS + "," if name == "myalloc" else ""
                off = (r.argv, lib, {var: extra + "prof:false"}, (False,))
                on = (r.argv, lib, {var: extra + "prof:true"}, (True, 19))
                got = run_pair(cell, run_bin, off, on, rep)
                parts.append(f"{name}=" + (f"{pct(cpu_s(got['on']) / cpu_s(got['off']) - 1)}"
                                           if got else f"FAIL({cell.fail[0]})"))
            progress(f"{rep + 1}/{oreps} {r.key}", parts)

    # ---- 2. cost per sample at lg_prof_sample 12 ------------------------
    cost_argv = ["prof", "pairs", str(n_cost), "16", "72"]
    on_conf = f"prof:true,lg_prof_sample:{LG_COST}"
    cost_cfg = [
        # label, allocator, runner, env var, prof-on options
        ("myalloc-gcc", "myalloc", my, run_bin, "MYALLOC_CONF", on_conf),
        ("myalloc-fp", "myalloc", my, run_fp, "MYALLOC_CONF", on_conf + ",prof_bt:fp"),
        ("myalloc-libgcc", "myalloc", my, run_bin, "MYALLOC_CONF", on_conf + ",prof_bt:libgcc"),
        ("jemalloc", "jemalloc", je, run_bin, "MALLOC_CONF", on_conf),
    ]
    cost = {c[0]: Cell(f"cost-{c[0]}") for c in cost_cfg}
    je_count = None  # jemalloc's samples, counted with prof_stats:true
    if cost_key in keys:
        if not je:
            cost["jemalloc"].skip = je_skip
        else:
            r = run_bin(cost_argv, je, {"MALLOC_CONF": on_conf + ",prof_stats:true"},
                        "cost-jemalloc-count")
            if "fail" not in r and r.get("nsamples", -1) > 0:
                je_count = r
            progress("jemalloc sample count (prof_stats)",
                     [f"{r.get('nsamples', -1):.0f}" if "fail" not in r else f"FAIL({r['fail']})"])
        print(f"bench-prof: cost per sample, {len(cost_cfg)} configurations x {reps} paired repetitions",
              file=sys.stderr)
        for rep in range(reps):
            k = rep % len(cost_cfg)
            parts = []
            for label, name, lib, runner, var, conf in cost_cfg[k:] + cost_cfg[:k]:
                cell = cost[label]
                if cell.skip or cell.fail:
                    continue
                off = (cost_argv, lib, {var: "prof:false"}, (False,))
                on = (cost_argv, lib, {var: conf}, (True, LG_COST))
                got = run_pair(cell, runner, off, on, rep)
                if got:
                    s = samples_of(got["on"])
                    if name == "jemalloc":
                        s = je_count["nsamples"] if je_count else None
                    parts.append(f"{label}=" + (f"{(cpu_s(got['on']) - cpu_s(got['off'])) / s * 1e9:.0f}ns"
                                                if s else "?"))
                else:
                    parts.append(f"{label}=FAIL({cell.fail[0]})")
            progress(f"{rep + 1}/{reps} {cost_key}", parts)

    # ---- 3. memory per live sampled object ------------------------------
    mem_argv = ["prof", "live", str(n_live), str(SIZE_LIVE)]
    mem = {a: Cell(f"memory-{a}") for a, _, _ in allocs}
    if mem_key in keys:
        if not je:
            mem["jemalloc"].skip = je_skip
        mreps = max(1, (reps + 1) // 2)
        print(f"bench-prof: memory, {n_live} live {SIZE_LIVE} B objects x {mreps} repetitions",
              file=sys.stderr)
        for rep in range(mreps):
            parts = []
            for name, lib, var in allocs:
                cell = mem[name]
                if cell.skip or cell.fail:
                    continue
                off = (mem_argv, lib, {var: "prof:false"}, (False,))
                on = (mem_argv, lib, {var: "prof:true,lg_prof_sample:0"}, (True, 0))
                got = run_pair(cell, run_bin, off, on, rep)
                parts.append(f"{name}=" + (f"{(got['on']['d_rss'] - got['off']['d_rss']) / n_live:.0f}B"
                                           if got else f"FAIL({cell.fail[0]})"))
            progress(f"{rep + 1}/{mreps} {mem_key}", parts)

    load1 = open("/proc/loadavg").read().split()[:3]
    meta = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": B.machine(),
        "commit": B.git_commit(args.repo),
        "reps": reps, "oreps": oreps, "quick": quick, "filter": filt,
        "elapsed": time.monotonic() - t_start,
        "load": (load0, load1),
        "myalloc": my, "jemalloc": je, "jemalloc_skip": je_skip,
        "repo": args.repo, "n_cost": n_cost, "n_live": n_live,
    }
    md = render(meta, rows, over, keys, cost_key, cost_cfg, cost, je_count, mem_key, mem)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "prof.md"), "w") as f:
        f.write(md + "\n")

    def cells_json(d):
        return {k: {"off": c.off, "on": c.on, "skip": c.skip,
                    "fail": c.fail[0] if c.fail else None} for k, c in d.items()}

    raw = {"meta": meta,
           "overhead": {r.key: {"argv": r.argv, "cells": cells_json(over[r.key])} for r in rows},
           "cost": {"argv": cost_argv, "cells": cells_json(cost), "jemalloc_count": je_count},
           "memory": {"argv": mem_argv, "cells": cells_json(mem)}}
    with open(os.path.join(args.out, "prof.json"), "w") as f:
        json.dump(raw, f, indent=1)
    print(md)
    print(f"\n(written to {os.path.relpath(os.path.join(args.out, 'prof.md'))})")
    failed = [c for d in ([over[r.key] for r in rows] + [cost, mem]) for c in d.values()
              if c.fail and c.label.find("jemalloc") < 0]
    if failed and os.environ.get("BENCH_STRICT", "0") not in ("", "0"):
        return 1
    return 0


# --------------------------------------------------------------------------
# Tables


def cost_per_sample(cell, je_count):
    """Per repetition: (CPU on - CPU off) / samples, in ns; plus the samples."""
    out, samples = [], []
    for off, on in zip(cell.off, cell.on):
        s = je_count["nsamples"] if je_count and "jemalloc" in cell.label else samples_of(on)
        if not s:
            return [], []
        out.append((cpu_s(on) - cpu_s(off)) / s * 1e9)
        samples.append(s)
    return out, samples


def render(meta, rows, over, keys, cost_key, cost_cfg, cost, je_count, mem_key, mem):
    L = []
    L.append("# myalloc profiler benchmarks")
    L.append("")
    L.append(f"{meta['date']} - {meta['machine']} - myalloc {meta['commit']} - "
             f"{meta['oreps']} paired repetitions (overhead), {meta['reps']} (cost per sample)"
             f"{' (QUICK)' if meta['quick'] else ''}"
             f"{' - filter ' + meta['filter'] if meta['filter'] else ''} - "
             f"{meta['elapsed']:.0f} s - load average {' '.join(meta['load'][0])} at the start, "
             f"{' '.join(meta['load'][1])} at the end")
    L.append("")
    L.append("- myalloc: lib/libmyalloc.so (a private copy for this run)")
    L.append(f"- jemalloc: {meta['jemalloc'] or '**skipped**: ' + str(meta['jemalloc_skip'])}")
    L.append("")
    L.append("Every \"prof on\" run is paired with a \"prof off\" run of the same program "
             "and allocator, back to back (order alternating); values are medians over the "
             "repetitions, [min, max] the range of the per-pair figures. CPU time (user + sys) "
             "of the timed region only. See \"Profiler\" in bench/README.md.")
    L.append("")

    # cost first: the overhead table uses it for its prediction
    costs = {}
    for label, *_ in cost_cfg:
        c = cost[label]
        if c.ok():
            v, s = cost_per_sample(c, je_count)
            if v:
                costs[label] = (v, s)

    if rows:
        L.append("## CPU overhead of prof:true at the default rate (lg_prof_sample 19)")
        L.append("")
        L.append("Target: at most +1%. \"predicted\" = myalloc's samples x its cost per "
                 f"sample (lg {LG_COST} table below, 16-72 B objects) / CPU time with prof "
                 "off: the overhead implied by the cost per sample, free of timing noise. "
                 "\"budget for +1%\" = 1% of the CPU time with prof off / myalloc's samples: "
                 "what a sample may cost, all told, for the target to hold (compare it with "
                 "the cost per sample below).")
        L.append("")
        header = ["workload", "threads", "myalloc off CPU ns/op", "myalloc prof:true",
                  "myalloc overhead [min, max]", "samples", "budget for +1% (ns per sample)",
                  "predicted (gcc)", "predicted (fp)",
                  "predicted (libgcc)",
                  "jemalloc off CPU ns/op", "jemalloc prof:true", "jemalloc overhead [min, max]"]
        out = []
        for r in rows:
            row = [r.name, r.threads]
            c = over[r.key]["myalloc"]
            if c.ok():
                off = [cpu_s(x) / x["ops"] * 1e9 for x in c.off]
                on = [cpu_s(x) / x["ops"] * 1e9 for x in c.on]
                ratios = [cpu_s(b) / cpu_s(a) - 1 for a, b in zip(c.off, c.on)]
                smp = med([samples_of(x) for x in c.on if samples_of(x) is not None])
                cpu_off = med([cpu_s(x) for x in c.off])
                preds = []
                for label in ("myalloc-gcc", "myalloc-fp", "myalloc-libgcc"):
                    if label in costs and smp is not None and cpu_off:
                        preds.append(pct(smp * med(costs[label][0]) * 1e-9 / cpu_off))
                    else:
                        preds.append("-")
                budget = B.fmt_num(0.01 * cpu_off / smp * 1e9) if smp and cpu_off else "-"
                row += [B.fmt_num(med(off)), B.fmt_num(med(on)),
                        f"**{pct(med(ratios))}** {spread(ratios, pct)}",
                        B.fmt_num(smp), budget] + preds
            else:
                row += [c.status() or "-"] * 2 + ["-"] * 6
            c = over[r.key]["jemalloc"]
            if c.ok():
                off = [cpu_s(x) / x["ops"] * 1e9 for x in c.off]
                on = [cpu_s(x) / x["ops"] * 1e9 for x in c.on]
                ratios = [cpu_s(b) / cpu_s(a) - 1 for a, b in zip(c.off, c.on)]
                row += [B.fmt_num(med(off)), B.fmt_num(med(on)),
                        f"{pct(med(ratios))} {spread(ratios, pct)}"]
            else:
                row += [c.status() or "-"] * 2 + ["-"]
            out.append(row)
        L.append(B.table(header, out))
        L.append("")

    if cost_key in keys:
        L.append(f"## Cost per sample at lg_prof_sample {LG_COST}")
        L.append("")
        L.append(f"`prof pairs {meta['n_cost']} 16 72`: malloc+free pairs of random sizes "
                 "16-72 B. Cost per sample = (CPU time with prof on - CPU time with prof "
                 "off) / samples taken, per pair of runs. Target: at most 1000 ns, and below "
                 "jemalloc's.")
        L.append("")
        header = ["configuration", "unwinder", "off CPU ns/op", "on CPU ns/op", "samples",
                  "expected samples", "cost per sample (ns)", "[min, max]", "/ jemalloc"]
        out = []
        je_cost = med(costs["jemalloc"][0]) if "jemalloc" in costs else None
        descr = {"myalloc-gcc": ("myalloc", "gcc (DWARF, cached rules; default); program -O2"),
                 "myalloc-fp": ("myalloc", "fp (prof_bt:fp); program -O2 -fno-omit-frame-pointer"),
                 "myalloc-libgcc": ("myalloc", "libgcc (prof_bt:libgcc); program -O2"),
                 "jemalloc": ("jemalloc", "libgcc (jemalloc's); program -O2")}
        for label, *_ in cost_cfg:
            c = cost[label]
            row = list(descr[label])
            if label in costs:
                v, s = costs[label]
                off = [cpu_s(x) / x["ops"] * 1e9 for x in c.off]
                on = [cpu_s(x) / x["ops"] * 1e9 for x in c.on]
                x = c.on[0]
                R = float(1 << LG_COST)
                expected = x["usable_bytes"] / R - x["usable_sq"] / (2 * R * R)
                ms = med(s)
                how = " (prof_stats count)" if label == "jemalloc" else ""
                mv = med(v)
                row += [B.fmt_num(med(off)), B.fmt_num(med(on)),
                        f"{ms:,.0f}{how} ({ms / expected:.3f} x expected)", f"{expected:,.0f}",
                        f"**{mv:,.0f}**", spread(v, lambda y: f"{y:,.0f}"),
                        f"{mv / je_cost:.2f}" if je_cost and label != "jemalloc" else "-"]
            else:
                row += [c.status() or "no samples"] + ["-"] * 6
            out.append(row)
        L.append(B.table(header, out))
        L.append("")
        if "jemalloc" in costs:
            L.append("jemalloc's samples are counted in a separate run with `prof_stats:true` "
                     "(the sum of its `prof.stats.bins.<i>.accum` and `prof.stats.lextents."
                     "<i>.accum` counts); the timed runs leave prof_stats off. \"expected\" is "
                     "sum of 1 - exp(-Z/R) over the usable sizes Z allocated, R = 2^"
                     f"{LG_COST}.")
            L.append("")
        sk = [f"{label}: {med([x.get('nskipped', 0) for x in cost[label].on]):.0f}"
              for label in ("myalloc-gcc", "myalloc-fp", "myalloc-libgcc") if cost[label].ok()]
        if sk:
            L.append(f"myalloc prof.nskipped (samples not recorded), median: {', '.join(sk)}.")
            L.append("")

    if mem_key in keys:
        n = meta["n_live"]
        L.append(f"## Memory per live sampled small object ({SIZE_LIVE} B)")
        L.append("")
        L.append(f"`prof live {n} {SIZE_LIVE}`: {n} objects allocated and kept live; the "
                 "growth of each counter over that loop, divided by the number of objects. "
                 "\"sampled\" runs with `prof:true,lg_prof_sample:0` (every allocation is "
                 "sampled), \"not sampled\" with `prof:false`. Target: one page (4096 B) plus "
                 "the sample's record.")
        L.append("")
        header = ["allocator", "bytes per object", "RSS", "stats.active", "stats.allocated",
                  "stats.resident", "stats.mapped", "stats.metadata", "samples / object",
                  "CPU us per malloc"]
        out = []
        fields = ["d_rss", "d_active", "d_allocated", "d_resident", "d_mapped", "d_metadata"]
        for name in ("myalloc", "jemalloc"):
            c = mem[name]
            if not c.ok():
                out.append([name, c.status() or "-"] + ["-"] * 8)
                continue
            for side, runs in (("not sampled", c.off), ("sampled (lg 0)", c.on)):
                row = [name, side]
                for f in fields:
                    row.append(B.fmt_num(med([x[f] / n for x in runs])) if f in runs[0] else "-")
                s = [x["nsamples"] / n for x in runs if x.get("nsamples", -1) >= 0]
                row.append(f"{med(s):.3f}" if s else "-")
                row.append(f"{med([cpu_s(x) / n * 1e6 for x in runs]):.2f}")
                out.append(row)
            row = [name, "**sampled - not sampled**"]
            for f in fields:
                if f in c.on[0]:
                    d = [(b[f] - a[f]) / n for a, b in zip(c.off, c.on)]
                    txt = B.fmt_num(med(d))
                    row.append(f"**{txt}**" + (f" {spread(d)}" if len(d) > 1 else "")
                               if f == "d_rss" else txt)
                else:
                    row.append("-")
            row += ["", ""]
            out.append(row)
        L.append(B.table(header, out))
        L.append("")
        for name in ("myalloc", "jemalloc"):
            c = mem[name]
            if not c.ok():
                continue
            d = med([(b["d_rss"] - a["d_rss"]) / n for a, b in zip(c.off, c.on)])
            t = med([b["d_rss"] / n for b in c.on])
            L.append(f"- {name}: a live sampled {SIZE_LIVE} B object takes {t:,.0f} B of RSS = "
                     f"one page + {t - 4096:,.0f} B; {d:,.0f} B more than an unsampled one.")
        L.append("")

    fails = [(k, c) for k, d in ([(r.key, over[r.key]) for r in rows] +
                                 [(cost_key, cost), (mem_key, mem)]) for c in d.values()
             if c.fail]
    if fails:
        L.append("## Failures")
        L.append("")
        for k, c in fails:
            why, r = c.fail
            L.append(f"- **{c.label}** ({k}): {why}. Reproduce: `{r.get('cmd', '?')}`; "
                     f"log: {B.rel(r.get('log', '?'), meta['repo'])}")
            for l in r.get("stderr", []):
                L.append(f"  - `{l[:200]}`")
        L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
