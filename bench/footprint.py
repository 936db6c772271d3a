#!/usr/bin/env python3
"""Footprint benchmarks (make bench-footprint): how much memory each
allocator keeps, not how fast it is. Runs bench/src/footprint.c (frag,
server, threads) under myalloc (default options, with purging off, and with
the background thread), glibc, jemalloc, tcmalloc and mimalloc, interleaved
and repeated, and writes bench/results/footprint.md (and footprint.json).

Called by bench/footprint.sh; see "Footprint" in bench/README.md for the
workloads, the numbers and the targets. Reuses bench.py's helpers.
Standard library only.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import bench as B  # bench/bench.py: run_program, probe, select_workloads, table, fmt_num, machine, git_commit, rel, paired_ratios

PEERS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
SLAB_PEERS = ("jemalloc", "tcmalloc", "mimalloc")
# myalloc variants: column name -> MYALLOC_CONF
MY_VARIANTS = {
    "myalloc": "",
    "myalloc no-purge": "dirty_decay_ms:-1",
    "myalloc bg": "background_thread:true",
}


class Workload:
    def __init__(self, name, argv, desc, mid_desc, final_desc):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.desc = desc
        self.mid_desc = mid_desc
        self.final_desc = final_desc

    @property
    def key(self):
        return self.name


def workloads(scale, idle_ms, server_ms):
    def n(x):
        return max(1, int(x * scale))

    return [
        Workload("frag", ["footprint", "frag", n(260), 4, idle_ms],
                 f"{n(260)} MB of 16 B-8 KiB objects; 4 x (free 90% at random, refill with the "
                 "size window moved by 2x)",
                 "after the first 90% free", "after the 4th refill"),
        Workload("server", ["footprint", "server", n(256), n(200_000), idle_ms, max(1000, n(server_ms))],
                 f"sessions open and expire: up to {n(256)} MB, down to 10%, up to 60% (shifted mix), "
                 f"over {max(1000, n(server_ms)) / 1000:g} s",
                 "at the trough (10% of the peak)", "at the end (60% of the peak)"),
        Workload("threads", ["footprint", "threads", n(128), n(1000), idle_ms],
                 f"{n(1000)} short threads (waves of 4) replace objects of a {n(128)} MB shared pool",
                 "after the main thread frees 90% of the pool", "after the last thread exited"),
    ]


def run_one(bindir, wl, lib, conf, timeout, log_dir, tag):
    cmd = [os.path.join(bindir, wl.argv[0])] + wl.argv[1:]
    env_set = {}
    if conf:
        env_set["MYALLOC_CONF"] = conf
    if lib:
        env_set["LD_PRELOAD"] = lib

    def complained(err):
        lines = [l for l in err.splitlines() if l.startswith("<myalloc>:")]
        return "myalloc complained: " + lines[0][:120] if lines else None

    res = B.run_program(cmd, env_set, timeout, os.path.join(log_dir, f"footprint-{wl.name}-{tag}.log"),
                        f"command: {' '.join(cmd)}\nLD_PRELOAD={lib}\nMYALLOC_CONF={conf}\n",
                        clear=("LD_PRELOAD", "MYALLOC_CONF", "MALLOC_CONF"), reject=complained)
    if "fail" in res:
        res["cmd"] = (f"MYALLOC_CONF={conf} " if conf else "") + \
                     (f"LD_PRELOAD={lib} " if lib else "") + " ".join(cmd)
    return res


class Cell:
    def __init__(self):
        self.runs = []
        self.fail = None
        self.fail_res = {}
        self.skip = None

    def ok(self):
        return not self.fail and not self.skip and bool(self.runs)

    def med(self, f):
        vals = [f(r) for r in self.runs]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    def spread(self, f):
        vals = [v for v in (f(r) for r in self.runs) if v is not None]
        if len(vals) < 2:
            return 0.0
        m = statistics.median(vals)
        return (max(vals) - min(vals)) / m if m else 0.0


MIB = 1024.0  # kB per MiB
# The time target's pair: run back to back in every repetition.
PAIRED = ("myalloc", "myalloc no-purge")


def with_extra(cell, extra):
    """cell with the extra pairs' runs added (a new Cell; None if cell is)."""
    if cell is None or extra is None or not cell.ok():
        return cell
    c = Cell()
    c.runs = cell.runs + extra.runs
    return c


def cpu(r):
    return r["user_s"] + r["sys_s"]


# Never purging does not spare the work of freeing the pages: the kernel
# does it when the process exits, after the timed region. The whole
# process's time counts it for both.
def proc_cpu(r):
    return r.get("proc_cpu_s")


# The lowest peak an allocator could have with its size classes: its live
# objects at the workload's peak as they lie in those classes, plus the
# program as it started and the harness's own tables (footprint.c, "the
# floor"); VmHWM counts all three.
def peak_floor_kb(r):
    if "floor_kb" not in r:
        return None
    return r["floor_kb"] + r["base_kb"] + r["floor_harness_kb"]


# The rows of a workload's table: label, function of a run, unit, lower is better.
def metric_rows(wl, idle_ms):
    return [
        ("peak RSS (VmHWM), MiB", lambda r: r["maxrss_kb"] / MIB),
        ("peak floor (live objects in the allocator's size classes, program, harness tables), MiB",
         lambda r: None if peak_floor_kb(r) is None else peak_floor_kb(r) / MIB),
        (f"RSS {wl.mid_desc}, MiB", lambda r: r["mid_kb"] / MIB),
        (f"RSS {wl.final_desc}, MiB", lambda r: r["final_kb"] / MIB),
        ("final RSS / live bytes", lambda r: r["final_kb"] * 1024 / r["final_live"]),
        ("RSS right after freeing everything, MiB", lambda r: r["freed_kb"] / MIB),
        (f"RSS after {idle_ms / 1000:g} s idle, MiB", lambda r: r["idle_kb"] / MIB),
        ("CPU time of the workload, s", cpu),
        ("CPU time of the whole process (its exit included), s", proc_cpu),
    ]


def render(wls, results, names, meta, cpu_extra):
    L = []
    L.append("# myalloc footprint benchmarks")
    L.append("")
    L.append(f"{meta['date']} - {meta['machine']} - myalloc {meta['commit']} - {meta['reps']} "
             f"repetitions{' (QUICK)' if meta['quick'] else ''}"
             f"{' + ' + str(meta['cpu_pairs']) + ' pairs for the CPU target' if meta['cpu_pairs'] else ''}"
             f"{' - filter ' + meta['filter'] if meta['filter'] else ''} - {meta['elapsed']:.0f} s - "
             f"load average {meta['load_start']:.2f} at the start, {meta['load_end']:.2f} at the end")
    L.append("")
    for n, (lib, conf, skip) in meta["allocators"].items():
        if skip:
            L.append(f"- {n}: **skipped**: {skip}")
            continue
        shown = B.rel(lib, meta["repo"]) if lib else "system C library (no LD_PRELOAD)"
        if conf:
            shown += f" with MYALLOC_CONF={conf}"
        L.append(f"- {n}: {shown}")
    L.append("")
    L.append("Medians over the repetitions. RSS excludes the harness's own tables; live bytes "
             "are request sizes. In parentheses: myalloc (default options) / that column: below "
             "1.00 myalloc is better. Bold: the best peer (glibc, jemalloc, tcmalloc, mimalloc). "
             "See bench/README.md, section Footprint.")
    L.append("")
    targets = []
    for w in wls:
        cells = results[w.key]
        L.append(f"## {w.name}: {w.desc}")
        L.append("")
        L.append(f"`{meta['bin_rel']}/{' '.join(w.argv)}`")
        L.append("")
        header = ["metric"] + names + ["myalloc / best peer", "noise"]
        rows = []
        for label, f in metric_rows(w, meta["idle_ms"]):
            vals = {n: (cells[n].med(f) if cells[n].ok() else None) for n in names}
            best = None
            for n in PEERS:
                if n in vals and vals[n] is not None and (best is None or vals[n] < best[1]):
                    best = (n, vals[n])
            my = vals.get("myalloc")
            texts = []
            for n in names:
                c = cells[n]
                if c.skip:
                    texts.append("skipped")
                    continue
                if c.fail:
                    texts.append(f"FAIL ({c.fail})")
                    continue
                v = vals[n]
                t = B.fmt_num(v)
                if n != "myalloc" and my is not None and v:
                    t += f" ({my / v:.2f})"
                if best and best[0] == n:
                    t = f"**{t}**"
                texts.append(t)
            final = f"{my / best[1]:.2f} ({best[0]})" if my is not None and best and best[1] else "-"
            noise = max([cells[n].spread(f) for n in names if cells[n].ok()] or [0])
            rows.append([label] + texts + [final, f"{noise * 100:.0f}%"])
        L.append(B.table(header, rows, ["l"] + ["r"] * (len(header) - 1)))
        L.append("")
        # Targets of the issue, for this workload.
        my = cells["myalloc"]
        if not my.ok():
            continue

        def med(name, f):
            c = cells.get(name)
            return c.med(f) if c is not None and c.ok() else None

        ratio = med("myalloc", lambda r: r["final_kb"] * 1024 / r["final_live"])
        final_my = med("myalloc", lambda r: r["final_kb"])
        slab = [(n, med(n, lambda r: r["final_kb"])) for n in SLAB_PEERS]
        slab = [(n, v) for n, v in slab if v is not None]
        idle_my = med("myalloc", lambda r: r["idle_kb"])
        idle_glibc = med("glibc", lambda r: r["idle_kb"])
        peak_my = med("myalloc", lambda r: r["maxrss_kb"])
        floor_my = med("myalloc", peak_floor_kb)
        peaks = [(n, med(n, lambda r: r["maxrss_kb"])) for n in PEERS]
        peaks = [(n, v) for n, v in peaks if v is not None]
        # The CPU target: the repetitions' pairs and the extra ones (main()).
        my_t, np_t = (with_extra(cells.get(n), cpu_extra.get(w.key, {}).get(n)) for n in PAIRED)
        cpu_my = my_t.med(cpu)
        cpu_np = np_t.med(cpu) if np_t is not None and np_t.ok() else None
        # Fastest runs: interference only adds time (bench/README.md).
        cpu_my_min = min(cpu(r) for r in my_t.runs)
        cpu_np_min = min(cpu(r) for r in np_t.runs) if cpu_np is not None else None

        def verdict(ok):
            return "yes" if ok else "**no**"

        targets.append([w.name, "final RSS <= 1.25 x live", f"{ratio:.2f} x", verdict(ratio <= 1.25)])
        if slab:
            worst = min(slab, key=lambda x: x[1])
            targets.append([w.name, "final RSS below every slab-based peer",
                            f"{final_my / MIB:.0f} MiB vs {worst[1] / MIB:.0f} ({worst[0]})",
                            verdict(final_my < worst[1])])
        if idle_glibc:
            targets.append([w.name, "RSS after freeing everything (idle) <= 2 x glibc's",
                            f"{idle_my / MIB:.1f} MiB vs {idle_glibc / MIB:.1f} ({idle_my / idle_glibc:.2f} x)",
                            verdict(idle_my <= 2 * idle_glibc)])
        if peaks:
            bp = min(peaks, key=lambda x: x[1])
            floor = ""
            if floor_my is not None:
                floor = (f"; myalloc's peak floor {floor_my / MIB:.0f} MiB" +
                         (": above the best peer's peak, so out of reach with its size classes"
                          if floor_my > bp[1] else ""))
            targets.append([w.name, "peak RSS <= the best peer's",
                            f"{peak_my / MIB:.0f} MiB vs {bp[1] / MIB:.0f} ({bp[0]}): {peak_my / bp[1]:.2f} x{floor}",
                            verdict(peak_my <= bp[1])])
        paired = B.paired_ratios(my_t, np_t, cpu)
        if cpu_np and paired:
            whole = ""
            pc = B.paired_ratios(my_t, np_t, proc_cpu)
            if pc:
                whole = f"; whole process, paired: {statistics.median(pc):.3f} x"
            pm = statistics.median(paired)
            targets.append([w.name, "CPU time <= 1.05 x myalloc no-purge",
                            f"{len(paired)} paired runs: {pm:.3f} x [{min(paired):.3f}, {max(paired):.3f}] "
                            f"(medians: {cpu_my:.3f} s vs {cpu_np:.3f} s, {cpu_my / cpu_np:.3f} x; "
                            f"fastest runs: {cpu_my_min / cpu_np_min:.3f} x{whole})",
                            verdict(pm <= 1.05)])
    if targets:
        L.append("## Targets (the issue's, per workload)")
        L.append("")
        L.append(B.table(["workload", "target", "myalloc", "met"], targets, ["l", "l", "r", "l"]))
        L.append("")
    fails = [(w, n, results[w.key][n]) for w in wls for n in names if results[w.key][n].fail]
    if fails:
        L.append("## Failures")
        L.append("")
        for w, n, c in fails:
            L.append(f"- **{n}** {w.key}: {c.fail} (after {len(c.runs)} good runs). "
                     f"Reproduce: `{c.fail_res.get('cmd', '?')}`; log: "
                     f"{B.rel(c.fail_res.get('log', '?'), meta['repo'])}")
            for l in c.fail_res.get("stderr", []):
                L.append(f"  - `{l[:200]}`")
        L.append("")
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--alloc", action="append", default=[], help="name=path ('' = no preload)")
    ap.add_argument("--skip", action="append", default=[], help="name=reason")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()

    quick = os.environ.get("BENCH_QUICK", "0") not in ("", "0")
    reps = int(os.environ.get("BENCH_REPS", "2" if quick else "5"))
    scale = float(os.environ.get("BENCH_SCALE", "0.25" if quick else "1"))
    timeout = float(os.environ.get("BENCH_TIMEOUT", "120"))
    filt = os.environ.get("BENCH_FILTER", "")
    idle_ms = int(os.environ.get("FOOTPRINT_IDLE_MS", "2000"))
    server_ms = int(os.environ.get("FOOTPRINT_SERVER_MS", "8000"))
    # The CPU target compares two runs of one program whose times differ by
    # a few percent, where one run differs from the next by up to 20% on a
    # shared machine: after the repetitions, this many more back-to-back
    # pairs of myalloc and myalloc no-purge per workload, for that target
    # alone (the tables keep to the repetitions).
    cpu_pairs = int(os.environ.get("FOOTPRINT_CPU_PAIRS", "0" if quick else "10"))

    wls, status = B.select_workloads(workloads(scale, idle_ms, server_ms), filt, args.list, "footprint", 10)
    if status is not None:
        return status

    # Columns: the myalloc variants, glibc, the peers.
    allocs = []  # (column, lib, conf)
    meta_allocs = {}
    for a in args.alloc:
        n, _, lib = a.partition("=")
        if n == "myalloc":
            for col, conf in MY_VARIANTS.items():
                allocs.append((col, lib, conf))
                meta_allocs[col] = (lib, conf, None)
        else:
            allocs.append((n, lib, ""))
            meta_allocs[n] = (lib, "", None)
    for s in args.skip:
        n, _, why = s.partition("=")
        meta_allocs[n] = (None, "", why)
    names = list(meta_allocs)
    if "myalloc" not in meta_allocs:
        print("footprint: no myalloc given", file=sys.stderr)
        return 1

    results = {w.key: {n: Cell() for n in names} for w in wls}
    for n, (lib, conf, why) in meta_allocs.items():
        if why:
            for w in wls:
                results[w.key][n].skip = why
    runnable = []
    probed = {}
    for col, lib, conf in allocs:
        if lib not in probed:
            probed[lib] = B.probe(args.bin, (col, lib))
        why = probed[lib]
        if why:
            print(f"footprint: {col}: {why}; its column will show FAIL", file=sys.stderr)
            for w in wls:
                results[w.key][col].fail = why
        else:
            runnable.append((col, lib, conf))

    log_dir = os.path.join(args.out, "logs")
    load_start = os.getloadavg()[0]
    print(f"footprint: {len(wls)} workloads x {len(runnable)} columns x {reps} repetitions"
          f"{' (quick)' if quick else ''}; load average {load_start:.2f}", file=sys.stderr)
    t_start = time.monotonic()
    # myalloc and myalloc no-purge run back to back (in turn first), as one
    # unit of the rotation: the time target is their ratio, taken per
    # repetition (B.paired_ratios), which the machine's slow swings in speed
    # affect far less than a ratio of medians of runs minutes apart.
    units, pair = [], [c for c in runnable if c[0] in PAIRED]
    for c in runnable:
        if c[0] not in PAIRED:
            units.append([c])
        elif c is pair[0]:
            units.append(pair)
    def run_rep(w, alloc, rep, keep, shown):
        """One run of w under alloc, repetition rep, kept in the Cell keep; a
        failure fails alloc's column. Returns what the progress line shows."""
        col, lib, conf = alloc
        r = run_one(args.bin, w, lib, conf, timeout, log_dir, col.replace(" ", "-"))
        r["rep"] = rep
        if "fail" in r:
            results[w.key][col].fail, results[w.key][col].fail_res = r["fail"], r
            return f"{col}=FAIL({r['fail']})"
        keep.runs.append(r)
        return f"{col}={shown(r)}"

    for rep in range(reps):
        k = rep % max(1, len(units))
        order = [c for u in units[k:] + units[:k] for c in (u if rep % 2 == 0 else u[::-1])]
        for w in wls:
            parts = []
            for a in order:
                cell = results[w.key][a[0]]
                if cell.fail:
                    parts.append(f"{a[0]}=skip")
                    continue
                parts.append(run_rep(w, a, rep, cell,
                                     lambda r: f"{r['final_kb'] / MIB:.0f}/{r['idle_kb'] / MIB:.0f}MiB"))
            print(f"[{rep + 1}/{reps} {time.monotonic() - t_start:5.0f}s] {w.key:8} final/idle RSS "
                  f"{' '.join(parts)}", file=sys.stderr, flush=True)
    cpu_extra = {w.key: {c[0]: Cell() for c in pair} for w in wls} if len(pair) == 2 else {}
    for i in range(cpu_pairs if cpu_extra else 0):
        for w in wls:
            if any(results[w.key][c[0]].fail for c in pair):
                continue
            parts = [run_rep(w, a, reps + i, cpu_extra[w.key][a[0]], lambda r: f"{cpu(r):.3f}s")
                     for a in (pair if i % 2 == 0 else pair[::-1])]
            print(f"[pair {i + 1}/{cpu_pairs} {time.monotonic() - t_start:5.0f}s] {w.key:8} CPU "
                  f"{' '.join(parts)}", file=sys.stderr, flush=True)

    meta = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": B.machine(),
        "commit": B.git_commit(args.repo),
        "reps": reps,
        "cpu_pairs": cpu_pairs if cpu_extra else 0,
        "quick": quick,
        "filter": filt,
        "elapsed": time.monotonic() - t_start,
        "allocators": meta_allocs,
        "repo": args.repo,
        "bin_rel": os.path.relpath(args.bin, args.repo),
        "idle_ms": idle_ms,
        "load_start": load_start,
        "load_end": os.getloadavg()[0],
    }
    md = render(wls, results, names, meta, cpu_extra)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "footprint.md"), "w") as f:
        f.write(md + "\n")
    raw = {"meta": meta, "workloads": {
        w.key: {"argv": w.argv, "results": {
            n: {"runs": c.runs, "fail": c.fail, "skip": c.skip} for n, c in results[w.key].items()
        }, "cpu_pairs": {n: c.runs for n, c in cpu_extra.get(w.key, {}).items()}} for w in wls}}
    with open(os.path.join(args.out, "footprint.json"), "w") as f:
        json.dump(raw, f, indent=1)
    print(md)
    print(f"\n(written to {os.path.relpath(os.path.join(args.out, 'footprint.md'))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
