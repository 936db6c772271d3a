#!/usr/bin/env python3
"""Instruction counts per malloc+free pair under callgrind (make bench-instr).

Called by bench/instr.sh. For each allocator and case, runs
build/bench/bin/instr under `valgrind --tool=callgrind` twice, with N1 and
N2 iterations, LD_PRELOAD set in valgrind's own environment. Then

    raw       = (total Ir(N2) - total Ir(N1)) / (pairs(N2) - pairs(N1))
    harness   = (Ir of the loop function(N2) - same(N1)) / (same pair count)
    allocator = raw - harness

where "Ir of the loop function" is the exclusive count callgrind_annotate
gives for run_pairs / run_batch. Callgrind's default --skip-plt=yes charges
PLT stub instructions to the function that called through the PLT, so the
harness figure includes the program's malloc@plt / free@plt jumps, and an
allocator's own PLT calls stay with the allocator. See bench/README.md.
Standard library only.
"""

import argparse
import concurrent.futures
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

BATCH = 1000


class Case:
    """A callgrind case: argv(n) runs it with n iterations of `per` pairs
    each; the harness is the exclusive count of the functions named."""

    def __init__(self, name, program, argv, n1, n2, per, harness, what, unit="pair"):
        self.name, self.program, self.argv = name, program, argv
        self.n1, self.n2, self.per, self.harness, self.what, self.unit = n1, n2, per, harness, what, unit


def cases(quick):
    d = 10 if quick else 1
    cs = [Case(f"pair-{size}", "instr", lambda n, s=size: ["pairs", s, n], 100_000 // d, 1_100_000 // d, 1,
               ["run_pairs"], f"{size} B malloc+free pairs")
          for size in (16, 64, 256)]
    cs.append(Case("batch-64", "instr", lambda n: ["batch", 64, n], 100 // d, 1_100 // d, BATCH, ["run_batch"],
                   f"batches of {BATCH} mallocs then {BATCH} frees, 64 B", "pair"))
    # Cross-thread frees (no target). The threads run one at a time under
    # valgrind, and how they interleave moves a count by up to about 2%
    # between runs (prodcons-1+1: 240.3-244.5 in three).
    # The harness is the threads' own functions; what is left includes the
    # program's locking and thread switches, the same for every allocator.
    cs.append(Case("prodcons-1+1", "prodcons", lambda n: [1, n, 16, 256], 20_000 // d, 80_000 // d, 1,
                   ["producer", "consumer"], "producer/consumer, every free remote, 16-256 B", "object"))
    cs.append(Case("larson-1k-2", "larson", lambda n: [2, 16, 1024, 1000, n], 50_000 // d, 150_000 // d, 2,
                   ["worker", "new_object"], "Larson-like, 2 threads, half the frees remote, 16 B-1 KiB", "op"))
    return cs


class ProfCase:
    """A profiler-overhead case: the instructions per op of argv(n) with
    profiling off and on (the default rate), for myalloc and jemalloc."""

    def __init__(self, name, program, argv, n1, n2, per, what):
        self.name, self.program, self.argv = name, program, argv
        self.n1, self.n2, self.per, self.what = n1, n2, per, what


# The rows of make bench's profiler table (bench/prof.py), single-threaded.
def prof_cases(quick):
    d = 10 if quick else 1
    return [
        ProfCase("prof-rand-16-72", "prof", lambda n: ["pairs", n, 16, 72], 1_000_000 // d, 3_000_000 // d, 1,
                 "malloc+free pairs, random sizes 16-72 B"),
        ProfCase("prof-batch-mixed", "batch", lambda n: ["mixed", 0, n], 1_000 // d, 4_000 // d, BATCH,
                 "1000 mallocs then 1000 frees, 16 B-4 KiB"),
        ProfCase("prof-larson-1k", "larson", lambda n: [1, 16, 1024, 1000, n], 200_000 // d, 800_000 // d, 1,
                 "Larson-like, 1 thread, 16 B-1 KiB"),
        ProfCase("prof-larson-32k", "larson", lambda n: [1, 16, 32768, 1000, n], 100_000 // d, 300_000 // d, 1,
                 "Larson-like, 1 thread, 16 B-32 KiB"),
    ]


# How each profiling allocator is told to profile, and the seed that makes
# myalloc's samples the same from run to run (jemalloc has none).
PROF_CONF = {"myalloc": ("MYALLOC_CONF", "prof:false", "prof:true,prof_seed:1"),
             "jemalloc": ("MALLOC_CONF", "prof:false", "prof:true")}


def signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*?)\s*$")


def annotate(path):
    """Exclusive Ir per function (keyed by the function name without file)
    plus 'TOTAL', from callgrind_annotate."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no",
                          "--inclusive=no", path],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"callgrind_annotate failed: {out.stderr.strip()[:200]}")
    res = {}
    objects = {}
    for l in out.stdout.splitlines():
        m = LINE.match(l)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        what = m.group(2)
        if what == "PROGRAM TOTALS":
            res["TOTAL"] = n
            continue
        obj = ""
        mo = re.match(r"^(.*?) \[(.*)\]$", what)
        if mo:
            what, obj = mo.group(1), mo.group(2)
        fn = what.rsplit(":", 1)[-1]
        res[fn] = res.get(fn, 0) + n
        objects[os.path.basename(obj)] = objects.get(os.path.basename(obj), 0) + n
    return res, objects


def run_callgrind(binary, lib, argv, n, tmp, tag, threads=False, extra_env=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(extra_env or {})
    if lib:
        env["LD_PRELOAD"] = lib  # in valgrind's own environment: it passes it on
    out = os.path.join(tmp, f"{tag}.out")
    # Threads run one at a time under valgrind; its fair scheduler keeps
    # their interleaving, and so the counts, closer from run to run.
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + \
        (["--fair-sched=yes"] if threads else []) + [binary] + [str(a) for a in argv]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0 or "RESULT" not in p.stdout:
        err = p.stderr.splitlines()
        why = [l.split("== ", 1)[-1].strip() for i, l in enumerate(err)
               if "Process terminating" in l or (i > 0 and "Process terminating" in err[i - 1])
               or "VERIFY FAILED" in l]
        status = (signal_name(-p.returncode) if p.returncode < 0 else f"exit {p.returncode}")
        raise RuntimeError(f"{status}: {'; '.join(why)[:160]} (N={n})")
    if "cannot be preloaded" in p.stderr:
        raise RuntimeError("preload failed")
    return annotate(out)


def run_pair(binary, lib, case, tmp, tag, threads=False, extra_env=None):
    """Callgrind runs of case with N1 and N2 iterations: both profiles, once
    the allocator's library is seen in the second (the preload worked)."""
    a1, _ = run_callgrind(binary, lib, case.argv(case.n1), case.n1, tmp, tag + "-1", threads, extra_env)
    a2, objs = run_callgrind(binary, lib, case.argv(case.n2), case.n2, tmp, tag + "-2", threads, extra_env)
    want = os.path.basename(os.path.realpath(lib)) if lib else "libc.so.6"
    if not any(o == want or o == os.path.basename(lib or "libc.so.6") for o in objs):
        raise RuntimeError(f"{want} does not appear in the profile: preload not active?")
    return a1, a2


def measure(bindir, alloc, case, tmp):
    name, lib = alloc
    binary = os.path.join(bindir, case.program)
    a1, a2 = run_pair(binary, lib, case, tmp, f"{name}-{case.name}", case.program != "instr")
    for fn in case.harness:
        if fn not in a1 or fn not in a2:
            raise RuntimeError(f"{fn} not found in the callgrind profile")
    pairs = (case.n2 - case.n1) * case.per
    raw = (a2["TOTAL"] - a1["TOTAL"]) / pairs
    harness = sum(a2[fn] - a1[fn] for fn in case.harness) / pairs
    return {"raw": raw, "harness": harness, "alloc": raw - harness,
            "cmd": f"{'LD_PRELOAD=' + lib + ' ' if lib else ''}valgrind --tool=callgrind "
                   f"{binary} {' '.join(str(a) for a in case.argv(case.n2))}"}


def measure_prof(bindir, alloc, case, tmp):
    """Instructions per op with profiling off and on, and the overhead."""
    name, lib = alloc
    var, off, on = PROF_CONF[name]
    binary = os.path.join(bindir, case.program)
    res = {}
    for key, conf in (("off", off), ("on", on)):
        a1, a2 = run_pair(binary, lib, case, tmp, f"{name}-{case.name}-{key}", extra_env={var: conf})
        res[key] = (a2["TOTAL"] - a1["TOTAL"]) / ((case.n2 - case.n1) * case.per)
    res["overhead"] = res["on"] / res["off"] - 1
    return res


def prof_section(pcs, allocs, results):
    """The profiler-overhead table (markdown lines)."""
    names = [n for n, _ in allocs if n in PROF_CONF]
    lines = ["## Profiler overhead in instructions: prof:true against prof:false, the default rate "
             "(lg_prof_sample 19)", "",
             "Instructions per op, (Ir(N2) - Ir(N1)) / (ops(N2) - ops(N1)), the whole program; myalloc "
             f"runs with prof_seed:1. The rows of make bench's profiler table (bench/prof.py) that run "
             "one thread. Instructions are not time: make bench's table measures that.", ""]
    head = "| workload |" + "".join(f" {n} off | {n} on | {n} overhead |" for n in names)
    lines += [head, "|:--|" + "--:|" * (3 * len(names))]
    for c in pcs:
        row = f"| {c.name[len('prof-'):]}: {c.what} (`{c.program} {' '.join(str(a) for a in c.argv(c.n2))}`) |"
        for n in names:
            r = results.get((n, c.name))
            if r is None or "fail" in r:
                row += f" FAIL ({(r or {}).get('fail', 'not run')[:60]}) | | |"
            else:
                row += f" {r['off']:.1f} | {r['on']:.1f} | {100 * r['overhead']:+.2f}% |"
        lines.append(row)
    lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--alloc", action="append", default=[])
    ap.add_argument("--skip", action="append", default=[])
    args = ap.parse_args()

    quick = os.environ.get("BENCH_QUICK", "0") not in ("", "0")
    filt = os.environ.get("BENCH_FILTER", "")
    cs = cases(quick)
    pcs = prof_cases(quick)
    if filt:
        cs = [c for c in cs if re.search(filt, c.name)]
        pcs = [c for c in pcs if re.search(filt, c.name)]
    allocs = []
    names = []
    skipped = {}
    for a in args.alloc:
        n, _, lib = a.partition("=")
        allocs.append((n, lib))
        names.append(n)
    for s in args.skip:
        n, _, why = s.partition("=")
        skipped[n] = why
        names.append(n)
    peers = [n for n in names if n != "myalloc"]

    tmp = tempfile.mkdtemp(prefix="bench-instr-")
    results = {}
    jobs = max(1, min(4, os.cpu_count() or 1))
    prof_allocs = [a for a in allocs if a[0] in PROF_CONF]
    print(f"bench-instr: {len(cs)} cases x {len(allocs)} allocators, {len(pcs)} profiler cases x "
          f"{len(prof_allocs)} allocators under callgrind ({jobs} at a time)", file=sys.stderr)
    # The cross-thread cases run alone, one after the other: what allocators
    # do on a clock (purging, decay) grows with the wall time of a run, and
    # a second callgrind beside it slowed it down (prodcons-1+1: myalloc
    # counted 260.8 with another job running, 240.3-245.0 alone).
    single = [c for c in cs if c.program == "instr"]
    threaded = [c for c in cs if c.program != "instr"]
    def run_all(fn, allocators, group, workers, show):
        """fn(bin, allocator, case, tmp) for every pair, workers at a time,
        into results (a failure as {"fail": why})."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
            futs = {ex.submit(fn, args.bin, a, c, tmp): (a[0], c.name) for a in allocators for c in group}
            for f in concurrent.futures.as_completed(futs):
                key = futs[f]
                try:
                    results[key] = f.result()
                    print(f"  {key[1]:16} {key[0]:9} {show(results[key])}", file=sys.stderr)
                except Exception as e:  # noqa: BLE001 - report any failure in the table
                    results[key] = {"fail": str(e)}
                    print(f"  {key[1]:16} {key[0]:9} FAIL: {e}", file=sys.stderr)

    try:
        for group, workers in ((single, jobs), (threaded, 1)):
            run_all(measure, allocs, group, workers,
                    lambda r: f"raw {r['raw']:7.1f}  harness {r['harness']:5.1f}  allocator {r['alloc']:7.1f}")
        run_all(measure_prof, prof_allocs, pcs, jobs,
                lambda r: f"off {r['off']:7.1f}  on {r['on']:7.1f}  overhead {100 * r['overhead']:+.2f}%")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    lines = ["# myalloc instruction counts (callgrind)", ""]
    lines.append(f"{datetime.datetime.now():%Y-%m-%d %H:%M}{' - QUICK' if quick else ''} - "
                 "instructions per malloc+free pair, (Ir(N2) - Ir(N1)) / (pairs(N2) - "
                 "pairs(N1)). allocator only = raw - the harness loop's own instructions "
                 "(including its PLT jumps). Ratios use the allocator-only figure; "
                 "lower is better. See bench/README.md.")
    lines.append("")
    for n, why in skipped.items():
        lines.append(f"- {n}: **skipped**: {why}")
    if skipped:
        lines.append("")
    fails = []
    for c in cs:
        cname, u = c.name, c.unit
        lines.append(f"## {cname}: {c.what} (N1={c.n1:,}, N2={c.n2:,}"
                     f"{' batches' if c.per == BATCH else ''}; "
                     f"`{c.program} {' '.join(str(a) for a in c.argv(c.n2))}`)")
        lines.append("")
        if c.program != "instr":
            lines.append(f"Harness: the exclusive instructions of {', '.join(c.harness)}. "
                         f"\"allocator only\" also holds the program's locking and thread "
                         "switches (the same work for every allocator). The threads run one at a "
                         "time (valgrind --fair-sched=yes); how they interleave moves a count by "
                         "up to about 2% from run to run. Work done on a clock (purging) is "
                         "inflated: a run under callgrind takes about 50 times as long.")
            lines.append("")
        lines.append(f"| allocator | instr/{u} (raw) | harness | instr/{u} (allocator only) | "
                     "/ tcmalloc | / best peer | / best peer (raw) |")
        lines.append("|:--|--:|--:|--:|--:|--:|--:|")

        def val(n, k):
            r = results.get((n, cname))
            return r[k] if r and "fail" not in r else None

        tc = val("tcmalloc", "alloc")
        peer_alloc = [(val(p, "alloc"), p) for p in peers if val(p, "alloc") is not None]
        peer_raw = [(val(p, "raw"), p) for p in peers if val(p, "raw") is not None]
        best = min(peer_alloc) if peer_alloc else None
        best_raw = min(peer_raw) if peer_raw else None
        for n in names:
            if n in skipped:
                lines.append(f"| {n} | skipped | | | | | |")
                continue
            r = results.get((n, cname))
            if r is None or "fail" in r:
                why = r["fail"] if r else "not run"
                lines.append(f"| {n} | FAIL ({why[:80]}) | | | | | |")
                fails.append((n, cname, why))
                continue

            def ratio(x, ref):
                return f"{x / ref:.2f}" if ref else "-"

            bname = "**" + n + "**" if n == "myalloc" else n
            lines.append(f"| {bname} | {r['raw']:.1f} | {r['harness']:.1f} | {r['alloc']:.1f} | "
                         f"{ratio(r['alloc'], tc)} | "
                         f"{ratio(r['alloc'], best[0]) if best else '-'}"
                         f"{' (' + best[1] + ')' if best and n == 'myalloc' else ''} | "
                         f"{ratio(r['raw'], best_raw[0]) if best_raw else '-'} |")
        hs = {round(results[(n, cname)]["harness"], 1) for n in names
              if (n, cname) in results and "fail" not in results[(n, cname)]}
        # Threads waiting for each other loop a varying number of times.
        spread = (max(hs) - min(hs)) / max(hs) if hs and max(hs) > 0 else 0
        if len(hs) > 1 and (c.program == "instr" or spread > 0.01):
            lines.append("")
            lines.append(f"Warning: the harness count differs between allocators ({sorted(hs)}); "
                         "it should not.")
        lines.append("")
    if pcs:
        lines += prof_section(pcs, prof_allocs, results)
        fails += [(n, c.name, results[(n, c.name)]["fail"]) for n, _ in prof_allocs for c in pcs
                  if "fail" in results.get((n, c.name), {})]
    if fails:
        lines.append("## Failures")
        lines.append("")
        for n, cname, why in fails:
            lines.append(f"- {n} {cname}: {why}")
        lines.append("")
    md = "\n".join(lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "instr.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    print(f"(written to {os.path.relpath(os.path.join(args.out, 'instr.md'))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
