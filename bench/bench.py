#!/usr/bin/env python3
"""Run the myalloc benchmark suite and write a Markdown table.

Called by bench/run.sh (which builds the programs and finds the peers);
see bench/README.md for the workloads, the method and how to read the
table. Standard library only.
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

# --------------------------------------------------------------------------
# Workloads
#
# kind:
#   st     single-thread; metric = CPU ns per op (lower is better)
#   mt     multi-thread; metric = ops per CPU-second (higher is better),
#          plus wall time
#   fs     false sharing; metrics = fs_fresh / fs_remote percentages


class Workload:
    def __init__(self, name, threads, kind, argv, desc, unit_ops="ops", floor_env=None):
        self.name = name
        self.threads = str(threads)
        self.kind = kind
        self.argv = [str(a) for a in argv]
        self.desc = desc
        self.unit_ops = unit_ops
        # Environment for a run under the null allocator (--floor), for
        # the rows it can run: None elsewhere.
        self.floor_env = floor_env

    @property
    def key(self):
        return f"{self.name}/{self.threads}"


def workloads(scale):
    def n(x):
        return max(1, int(x * scale))

    w = []
    for size in (16, 64, 256, 4096):
        w.append(Workload(f"pair-{size}", 1, "st", ["pairs", size, n(20_000_000)],
                          f"malloc+free pairs, {size} B", "pairs",
                          floor_env={"NULLALLOC_SIZE": str(size)}))
    w.append(Workload("batch-64", 1, "st", ["batch", "fixed", 64, n(20_000)],
                      "1000 mallocs then 1000 frees, 64 B", "pairs"))
    w.append(Workload("batch-mixed", 1, "st", ["batch", "mixed", 0, n(12_000)],
                      "1000 mallocs then 1000 frees, 16 B-4 KiB", "pairs"))
    w.append(Workload("realloc", 1, "st", ["realloc", 256, n(3_000_000), 65536],
                      "realloc grow/shrink chains up to 64 KiB", "reallocs"))
    for label, maxsz, total in (("1k", 1024, 6_000_000), ("32k", 32768, 1_000_000)):
        for t in (1, 2, 8):
            w.append(Workload(f"larson-{label}", t, "mt",
                              ["larson", t, 16, maxsz, 1000, max(1, n(total) // t)],
                              f"Larson-like, 16 B-{label[:-1]} KiB, cross-thread frees", "pairs"))
    for p in (1, 2, 8):
        w.append(Workload("prodcons", f"{p}+{p}", "mt",
                          ["prodcons", p, max(256, n(6_000_000) // p), 16, 256],
                          "producer/consumer, all frees remote, 16-256 B", "objects"))
    for c in (1, 2, 8):
        w.append(Workload("churn", c, "mt", ["churn", c, n(3_000), 256],
                          "thread churn: short threads, 256 allocations each", "threads"))
    for t in (2, 8):
        w.append(Workload("falseshare", t, "fs", ["falseshare", t, 8192],
                          "objects sharing a cache line with another thread's"))
    return w


# --------------------------------------------------------------------------
# Running


def sig_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def run_program(cmd, env_set, timeout, log_path, log_header, clear=("LD_PRELOAD",),
                reject=None, check=None):
    """Run cmd (an argv list) once, at most timeout seconds, with this
    environment minus the variables in `clear` plus env_set. Returns a dict:
    "elapsed", "proc_cpu_s" (user + system time of the whole process,
    its exit included, from the rusage of reaped children: runs are
    sequential), and either the values of the program's last RESULT line or
    "fail" (a short reason), with "log" (log_path, holding log_header, stdout
    and stderr) and "stderr" (its last lines).
    reject(err): the reason a run that exited 0 still failed, from its stderr
    (or None). check(res, err): run on the RESULT values, may add some;
    returns a reason to fail (or None). Used by bench.py, prof.py and
    footprint.py."""
    env = dict(os.environ)
    for k in clear:
        env.pop(k, None)
    env.update(env_set)
    t0 = time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True)
    except OSError as e:
        return {"fail": f"cannot run: {e}"}
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        rc = None
    else:
        rc = proc.returncode
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = {"elapsed": time.monotonic() - t0,
           "proc_cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)}
    rejected = reject(err) if reject and rc == 0 else None
    if rc is None:
        res["fail"] = f"TIMEOUT >{timeout:g}s"
    elif rc < 0:
        res["fail"] = sig_name(-rc)
    elif rc == 3 or "VERIFY FAILED" in err:
        res["fail"] = f"exit {rc}: verify"
    elif rc != 0:
        res["fail"] = f"exit {rc}"
    elif rejected:
        res["fail"] = rejected
    else:
        m = [l for l in out.splitlines() if l.startswith("RESULT ")]
        if not m:
            res["fail"] = "no RESULT line"
        else:
            for kv in m[-1].split()[1:]:
                k, _, v = kv.partition("=")
                try:
                    res[k] = float(v)
                except ValueError:
                    res[k] = v
            failed = check(res, err) if check else None
            if failed:
                res["fail"] = failed
    if "fail" in res:
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "w") as f:
            f.write(f"status: {res['fail']}\n{log_header}--- stdout\n{out}\n--- stderr\n{err}\n")
        res["log"] = log_path
        res["stderr"] = err.strip().splitlines()[-3:]
    return res


def run_one(binary_dir, wl, alloc, timeout, log_dir, extra_env=None):
    """Run a workload once under one allocator. Returns a dict with either
    the parsed RESULT values or 'fail' (a short reason)."""
    name, lib = alloc
    argv = [os.path.join(binary_dir, wl.argv[0])] + wl.argv[1:]
    log = os.path.join(log_dir, f"{wl.name}-{wl.threads.replace('+', 'p')}-{name}.log")
    env = dict(extra_env or {})
    if lib:
        env["LD_PRELOAD"] = lib
    return run_program(
        argv, env, timeout, log,
        f"command: {' '.join(argv)}\n" + "".join(f"{k}={v}\n" for k, v in env.items()),
        reject=lambda err: "preload failed" if "cannot be preloaded" in err else None,
        check=lambda res, err: "ops=0" if res.get("ops", 0) <= 0 else None)


def probe(binary_dir, alloc):
    """Check that malloc and free really come from the allocator's library."""
    name, lib = alloc
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if lib:
        env["LD_PRELOAD"] = lib
    try:
        p = subprocess.run([os.path.join(binary_dir, "probe")], env=env, capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"probe failed: {e}"
    if p.returncode != 0:
        return f"probe failed: {sig_name(-p.returncode) if p.returncode < 0 else p.returncode}"
    owners = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    want = os.path.realpath(lib) if lib else None
    for sym in ("malloc", "free"):
        got = owners.get(sym, "?")
        if lib:
            if os.path.realpath(got) != want and os.path.basename(got) != os.path.basename(lib):
                return f"{sym} comes from {got}, not {lib}"
        elif "libc.so" not in os.path.basename(got):
            return f"{sym} comes from {got}, not libc"
    return None


# --------------------------------------------------------------------------
# Metrics


def cpu_s(r):
    return r["user_s"] + r["sys_s"]


def metric(wl, r):
    """(value, time_like) for a successful run: time_like is the quantity
    where lower is better, used for all ratios."""
    if wl.kind == "st":
        v = cpu_s(r) / r["ops"] * 1e9  # CPU ns per op
        return v, v
    if wl.kind == "mt":
        c = max(cpu_s(r), 1e-6)
        v = r["ops"] / c  # ops per CPU second
        return v, 1.0 / v
    raise ValueError(wl.kind)


def med(xs):
    return statistics.median(xs) if xs else None


class Cell:
    """Results of one workload under one allocator."""

    def __init__(self):
        self.runs = []
        self.fail = None
        self.fail_res = None
        self.skip = None

    def ok(self):
        return self.fail is None and self.skip is None and self.runs

    def values(self, wl):
        return [metric(wl, r)[0] for r in self.runs]

    def med_metric(self, wl):
        return med(self.values(wl))

    def med_time_like(self, wl):
        return med([metric(wl, r)[1] for r in self.runs])

    def min_time_like(self, wl):
        """The fastest repetition: interference from other work on a shared
        machine only ever adds time, so the minimum is the run least
        disturbed by it."""
        return min(metric(wl, r)[1] for r in self.runs) if self.runs else None

    def med_key(self, k):
        return med([r[k] for r in self.runs if k in r])

    def spread(self, wl):
        v = self.values(wl)
        if len(v) < 2:
            return 0.0
        m = statistics.median(v)
        return (max(v) - min(v)) / m if m else 0.0


# --------------------------------------------------------------------------
# Formatting


def fmt_num(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}"


def status_text(cell):
    if cell.skip:
        return "skipped"
    if cell.fail:
        return f"FAIL ({cell.fail})"
    return None


def metric_unit(wl):
    if wl.kind == "st":
        return f"CPU ns/{wl.unit_ops[:-1]}"
    if wl.unit_ops == "threads":
        return "k threads/CPU-s"
    return f"M {wl.unit_ops}/CPU-s"


def display_metric(wl, v):
    if v is None:
        return None
    if wl.kind == "mt":
        return v / (1e3 if wl.unit_ops == "threads" else 1e6)
    return v


def table(header, rows, align=None):
    out = ["| " + " | ".join(header) + " |"]
    align = align or ["l"] * 2 + ["r"] * (len(header) - 2)
    out.append("|" + "|".join(":--" if a == "l" else "--:" for a in align) + "|")
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


def ratio_cells(wl, cells, names, get):
    """Per-allocator text 'value (myalloc/this)' and the final myalloc/best.
    get(cell) -> (display value, time_like) or None."""
    mine = cells["myalloc"]
    my = get(mine) if mine.ok() else None
    texts = []
    best = None
    for n in names:
        c = cells[n]
        st = status_text(c)
        if st:
            texts.append(st)
            continue
        val, tl = get(c)
        if n != "myalloc" and tl is not None and (best is None or tl < best[1]):
            best = (n, tl)
        texts.append(fmt_num(val))
    if my is not None:
        for i, n in enumerate(names):
            c = cells[n]
            if n == "myalloc" or not c.ok():
                continue
            tl = get(c)[1]
            r = my[1] / tl if tl else None
            mark = "**" if best and best[0] == n else ""
            texts[i] = f"{mark}{texts[i]}{mark} ({fmt_ratio(r)})"
    final = "-"
    if my is not None and best is not None and best[1]:
        final = f"{my[1] / best[1]:.2f} ({best[0]})"
    elif not mine.ok():
        final = "myalloc " + (status_text(mine) or "n/a")
    return texts, final


def best_runs_ratio(cells, names, wl):
    """myalloc / best peer on each allocator's fastest repetition."""
    mine = cells["myalloc"]
    peers = [(cells[n].min_time_like(wl), n) for n in names if n != "myalloc" and cells[n].ok()]
    if not mine.ok() or not peers:
        return "-"
    best, who = min(peers)
    return f"{mine.min_time_like(wl) / best:.2f} ({who})" if best else "-"


def paired_ratios(a, b, f):
    """f(run of a) / f(run of b) for each repetition both cells ran (runs
    carry their repetition in "rep"); [] unless both cells are ok. Used by
    footprint.py too."""
    if a is None or b is None or not a.ok() or not b.ok():
        return []
    by_rep = {r.get("rep"): r for r in b.runs}
    return [f(r) / f(by_rep[r.get("rep")]) for r in a.runs
            if r.get("rep") in by_rep and f(r) and f(by_rep[r.get("rep")])]


def paired_ratio(cells, names, wl):
    """myalloc / the best peer (by median) within each repetition: every
    repetition runs all allocators back to back, so a ratio taken inside
    one sees the machine in one state, where medians taken apart mix the
    quiet and the busy minutes. Median of the per-repetition ratios and
    their range."""
    peers = [(cells[n].med_time_like(wl), n) for n in names if n != "myalloc" and cells[n].ok()]
    if not peers:
        return "-"
    _, who = min(peers)
    ratios = paired_ratios(cells["myalloc"], cells[who], lambda r: metric(wl, r)[1])
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}] ({who})"


FLOOR = "no allocator"


def render_floor(wls, results, names, floor_results):
    """The pair rows against the null allocator: the harness's own time."""
    lines = ["## The pair rows without an allocator", "",
             f"\"{FLOOR}\": the same `pairs` runs, interleaved with the others, under "
             "`bench/src/preload/nullalloc.c`, whose malloc returns one static block and whose "
             "free does nothing: the loop, its calls through the PLT and its accesses to the "
             "object, without any allocator work. No allocator called through the PLT can run "
             "these rows faster. \"above the floor\": an allocator's median less the floor's, "
             "the time its own work adds. See bench/README.md.", ""]
    header = ["workload", f"{FLOOR}, CPU ns/pair", "myalloc", "best peer",
              f"{FLOOR} / best peer", "same, paired by repetition",
              "myalloc above the floor", "best peer above the floor", "myalloc / best peer, above the floor"]
    rows = []
    for w in wls:
        fc = floor_results.get(w.key)
        if fc is None:
            continue
        cells = results[w.key]
        peers = [(cells[n].med_time_like(w), n) for n in names if n != "myalloc" and cells[n].ok()]
        if not fc.ok() or not peers or not cells["myalloc"].ok():
            rows.append([w.name, status_text(fc) or "-"] + ["-"] * (len(header) - 2))
            continue
        best, who = min(peers)
        fl = fc.med_time_like(w)
        my = cells["myalloc"].med_time_like(w)
        ratios = paired_ratios(fc, cells[who], lambda r: metric(w, r)[1])
        paired = (f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"
                  if ratios else "-")
        above = f"{(my - fl) / (best - fl):.2f}" if best > fl else "-"
        rows.append([w.name, fmt_num(fl), fmt_num(my), f"{fmt_num(best)} ({who})",
                     fmt_ratio(fl / best), paired, fmt_num(my - fl), fmt_num(best - fl), above])
    lines.append(table(header, rows, ["l"] + ["r"] * (len(header) - 1)))
    lines.append("")
    return lines


def rel(path, repo):
    """path relative to the repository when inside it."""
    p = os.path.relpath(path, repo)
    return path if p.startswith("..") else p


def render(wls, results, names, meta, floor_results):
    lines = []
    lines.append("# myalloc benchmarks")
    lines.append("")
    lines.append(f"{meta['date']} - {meta['machine']} - myalloc {meta['commit']} - "
                 f"{meta['reps']} repetitions{' (QUICK)' if meta['quick'] else ''}"
                 f"{' - filter ' + meta['filter'] if meta['filter'] else ''} - "
                 f"{meta['elapsed']:.0f} s")
    lines.append("")
    for n, (lib, skip) in meta["allocators"].items():
        if skip:
            lines.append(f"- {n}: **skipped**: {skip}")
        else:
            shown = rel(lib, meta["repo"]) if lib else "system C library (no LD_PRELOAD)"
            if n == "myalloc":
                shown += " (this run's copy of lib/libmyalloc.so)"
            lines.append(f"- {n}: {shown}")
    lines.append("")
    lines.append("Values are medians over the repetitions. In parentheses: myalloc / that "
                 "allocator, in time terms (CPU time per op, or peak RSS): below 1.00 "
                 "myalloc is better. Bold: the best peer. \"same, paired by repetition\": the median "
                 "of myalloc / that peer within each repetition [range]. \"same, fastest runs\": the time "
                 "ratio on each allocator's fastest repetition instead of its median. "
                 "See bench/README.md.")
    lines.append("")

    speed_wls = [w for w in wls if w.kind in ("st", "mt")]
    if speed_wls:
        lines.append("## Speed and peak RSS")
        lines.append("")
        header = ["workload", "threads", "metric"] + names + \
                 ["myalloc / best peer (time)", "same, paired by repetition", "same, fastest runs"] + \
                 [f"RSS MiB {n}" for n in names] + \
                 ["myalloc / best peer (RSS)", "noise"]
        rows = []
        for w in speed_wls:
            cells = results[w.key]

            def get_speed(c, w=w):
                return display_metric(w, c.med_metric(w)), c.med_time_like(w)

            def get_rss(c):
                v = c.med_key("maxrss_kb")
                return (v / 1024 if v is not None else None), v

            texts, final = ratio_cells(w, cells, names, get_speed)
            rtexts, rfinal = ratio_cells(w, cells, names, get_rss)
            noise = max([cells[n].spread(w) for n in names if cells[n].ok()] or [0])
            rows.append([w.name, w.threads, metric_unit(w)] + texts + [final, paired_ratio(cells, names, w), best_runs_ratio(cells, names, w)] +
                        rtexts +
                        [rfinal, f"{noise * 100:.0f}%" if noise < 10 else ">999%"])
        lines.append(table(header, rows, ["l", "l", "l"] + ["r"] * (len(header) - 3)))
        lines.append("")

    if floor_results:
        lines += render_floor(wls, results, names, floor_results)

    mt = [w for w in wls if w.kind == "mt"]
    if mt:
        lines.append("## Wall time of the multi-threaded workloads (ms)")
        lines.append("")
        header = ["workload", "threads"] + names + ["myalloc / best peer"]
        rows = []
        for w in mt:
            cells = results[w.key]

            def get_wall(c):
                v = c.med_key("wall_s")
                return (v * 1e3 if v is not None else None), v

            texts, final = ratio_cells(w, cells, names, get_wall)
            rows.append([w.name, w.threads] + texts + [final])
        lines.append(table(header, rows))
        lines.append("")

    fs = [w for w in wls if w.kind == "fs"]
    if fs:
        lines.append("## False sharing: % of objects sharing a cache line with another "
                     "thread's live object (lower is better)")
        lines.append("")
        header = ["phase", "threads"] + names + ["myalloc - best peer (points)"]
        rows = []
        for w in fs:
            cells = results[w.key]
            for key, phase in (("fs_fresh", "fresh"), ("fs_remote", "after remote frees")):
                texts = []
                best = None
                for n in names:
                    c = cells[n]
                    st = status_text(c)
                    if st:
                        texts.append(st)
                        continue
                    v = c.med_key(key)
                    texts.append(f"{v:.1f}%" if v is not None else "-")
                    if n != "myalloc" and v is not None and (best is None or v < best[1]):
                        best = (n, v)
                my = cells["myalloc"].med_key(key) if cells["myalloc"].ok() else None
                final = "-"
                if my is not None and best is not None:
                    final = f"{my - best[1]:+.1f} ({best[0]})"
                elif not cells["myalloc"].ok():
                    final = "myalloc " + (status_text(cells["myalloc"]) or "n/a")
                rows.append([phase, w.threads] + texts + [final])
        lines.append(table(header, rows))
        lines.append("")

    fails = [(w, n, results[w.key][n]) for w in wls for n in names
             if results[w.key][n].fail]
    if fails:
        lines.append("## Failures")
        lines.append("")
        for w, n, c in fails:
            lib = meta["allocators"][n][0]
            if n == "myalloc":
                lib = "lib/libmyalloc.so"
            pre = f"LD_PRELOAD={rel(lib, meta['repo'])} " if lib else ""
            lines.append(f"- **{n}** {w.key}: {c.fail} (after {len(c.runs)} good runs). "
                         f"Reproduce: `{pre}{meta['bin_rel']}/{' '.join(w.argv)}`; "
                         f"log: {rel(c.fail_res.get('log', '?'), meta['repo'])}")
            for l in c.fail_res.get("stderr", []):
                lines.append(f"  - `{l[:200]}`")
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------


def select_workloads(wls, filt, list_only, prog, width):
    """The workloads whose key matches BENCH_FILTER (filt, a regex; empty: all).
    Returns (workloads, None) to go on, or (_, exit status) when --list printed
    them (0) or none matched (1)."""
    if filt:
        rx = re.compile(filt)
        wls = [w for w in wls if rx.search(w.key)]
    if list_only:
        for w in wls:
            print(f"{w.key:{width}} {' '.join(w.argv)}")
        return wls, 0
    if not wls:
        print(f"{prog}: no workload matches BENCH_FILTER={filt!r}", file=sys.stderr)
        return wls, 1
    return wls, None


def git_commit(repo):
    try:
        c = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10).stdout.strip()
        d = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no",
                            "--", "src", "include", "Makefile"],
                           capture_output=True, text=True, timeout=10).stdout.strip()
        return (c or "?") + ("+dirty" if d else "")
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    model = l.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), Linux {platform.release()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--alloc", action="append", default=[], help="name=path ('' = no preload)")
    ap.add_argument("--skip", action="append", default=[], help="name=reason")
    ap.add_argument("--floor", default="", help="the null allocator (bench/src/preload/nullalloc.c), "
                    "run on the rows that can take it")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    args = ap.parse_args()

    quick = os.environ.get("BENCH_QUICK", "0") not in ("", "0")
    reps = int(os.environ.get("BENCH_REPS", "3" if quick else "5"))
    scale = float(os.environ.get("BENCH_SCALE", "0.15" if quick else "1"))
    timeout = float(os.environ.get("BENCH_TIMEOUT", "30" if quick else "120"))
    filt = os.environ.get("BENCH_FILTER", "")

    wls, status = select_workloads(workloads(scale), filt, args.list, "bench", 20)
    if status is not None:
        return status

    allocs = []  # (name, lib)
    meta_allocs = {}
    for a in args.alloc:
        n, _, lib = a.partition("=")
        allocs.append((n, lib))
        meta_allocs[n] = (lib, None)
    for s in args.skip:
        n, _, why = s.partition("=")
        meta_allocs[n] = (None, why)
    names = list(meta_allocs)  # display order: as given (myalloc, glibc, peers)
    if "myalloc" not in meta_allocs:
        print("bench: no myalloc given", file=sys.stderr)
        return 1

    results = {w.key: {n: Cell() for n in names} for w in wls}
    for n, (lib, why) in list(meta_allocs.items()):
        if why:
            for w in wls:
                results[w.key][n].skip = why
    runnable = []
    for a in allocs:
        why = probe(args.bin, a)
        if why:
            print(f"bench: {a[0]}: {why}; its column will show FAIL", file=sys.stderr)
            for w in wls:
                results[w.key][a[0]].fail = why
                results[w.key][a[0]].fail_res = {}
        else:
            runnable.append(a)

    floor = (FLOOR, args.floor) if args.floor else None
    if floor:
        why = probe(args.bin, floor)
        if why:
            print(f"bench: the null allocator: {why}; no floor", file=sys.stderr)
            floor = None
    floor_results = {w.key: Cell() for w in wls if floor and w.floor_env}

    log_dir = os.path.join(args.out, "logs")
    if os.path.isdir(log_dir):
        for f in os.listdir(log_dir):
            if f.endswith(".log"):
                os.unlink(os.path.join(log_dir, f))
    print(f"bench: {len(wls)} workloads x {len(runnable)} allocators x {reps} repetitions"
          f"{' (quick)' if quick else ''}", file=sys.stderr)
    t_start = time.monotonic()
    for rep in range(reps):
        # Round-robin: every repetition runs each workload under every
        # allocator back to back, the starting allocator rotating.
        k = rep % max(1, len(runnable))
        order = runnable[k:] + runnable[:k]
        for w in wls:
            parts = []
            w_order = list(order)
            if w.key in floor_results:
                w_order.insert(rep % (len(w_order) + 1), floor)
            for a in w_order:
                cell = floor_results[w.key] if a is floor else results[w.key][a[0]]
                if cell.fail:
                    parts.append(f"{a[0]}=skip")
                    continue
                r = run_one(args.bin, w, a, timeout, log_dir,
                            w.floor_env if a is floor else None)
                r["rep"] = rep
                if "fail" in r:
                    cell.fail = r["fail"]
                    cell.fail_res = r
                    parts.append(f"{a[0]}=FAIL({r['fail']})")
                else:
                    cell.runs.append(r)
                    if w.kind == "fs":
                        parts.append(f"{a[0]}={r.get('fs_fresh', 0):.1f}/"
                                     f"{r.get('fs_remote', 0):.1f}%")
                    else:
                        parts.append(f"{a[0]}={fmt_num(display_metric(w, metric(w, r)[0]))}")
            print(f"[{rep + 1}/{reps} {time.monotonic() - t_start:5.0f}s] {w.key:16} "
                  f"{' '.join(parts)}", file=sys.stderr, flush=True)

    meta = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "commit": git_commit(args.repo),
        "reps": reps,
        "quick": quick,
        "filter": filt,
        "elapsed": time.monotonic() - t_start,
        "allocators": meta_allocs,
        "repo": args.repo,
        "bin_rel": os.path.relpath(args.bin, args.repo),
    }
    md = render(wls, results, names, meta, floor_results)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write(md + "\n")
    raw = {"meta": meta, "workloads": {
        w.key: {"argv": w.argv, "kind": w.kind, "results": {
            n: {"runs": c.runs, "fail": c.fail, "skip": c.skip}
            for n, c in list(results[w.key].items()) +
            ([(FLOOR, floor_results[w.key])] if w.key in floor_results else [])
        }} for w in wls}}
    with open(os.path.join(args.out, "latest.json"), "w") as f:
        json.dump(raw, f, indent=1)
    print(md)
    print(f"\n(written to {os.path.relpath(os.path.join(args.out, 'latest.md'))})")
    failed_mine = [w.key for w in wls if results[w.key]["myalloc"].fail]
    if failed_mine:
        print(f"bench: myalloc FAILED: {', '.join(failed_mine)} (see Failures above)",
              file=sys.stderr)
        if os.environ.get("BENCH_STRICT", "0") not in ("", "0"):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
