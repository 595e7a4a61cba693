"""Side-by-side speed and peak memory of reading one large CUDA memory snapshot.

Issue 9's acceptance, measured in one run on one generated snapshot with >= 2 million trace
entries (written by ``kvscope.memtrace.generator``, kept out of the repository, in /tmp by
default):

- ``pickle.load``: the floor for any Python reader of the format;
- kvscope full analysis (no cache): target <= 1.3x ``pickle.load``;
- kvscope analysis from its columnar cache: target < 1 s;
- ``python -m torch.cuda._memory_viz stats`` (and ``trace`` / ``trace_plot`` unless
  ``--skip-slow``): kvscope's peak RSS must stay at or below ``stats``'.

Every measurement runs in a fresh process; its peak RSS is that process's ``ru_maxrss``
read with ``os.wait4``, its wall time is measured around the whole process, and where the
child can time its own operation (``op s``) it prints that too (interpreter start-up and
imports excluded). Usage::

    PYTHONPATH=src python benchmarks/memtrace_speed.py [--entries 2000000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PICKLE_LOAD = """
import pickle, sys, time
t = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    pickle.load(f)
print("OP", time.perf_counter() - t)
"""

KVSCOPE_API = """
import sys, time
t = time.perf_counter()
from kvscope.memtrace.load import load_snapshot
from kvscope.memtrace.analysis import analyze
cols, cached = load_snapshot(sys.argv[1], use_cache=sys.argv[2] == "cache")
analyze(cols)
print("OP", time.perf_counter() - t)
"""


def measure(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run ``cmd``; return wall and CPU seconds, peak RSS (MiB) and the child's own ``op``
    seconds (CPU time is the steadier figure on a shared machine)."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t
        out.seek(0)
        text = out.read().decode(errors="replace")
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... exited with {p.returncode}")
    op = next((float(ln.split()[1]) for ln in text.splitlines() if ln.startswith("OP ")), None)
    cpu = usage.ru_utime + usage.ru_stime
    res = {"wall_s": wall, "cpu_s": cpu, "rss_mib": usage.ru_maxrss / 1024}
    if op is not None:
        res["op_s"] = op
    return res


GENERATE = """
import pickle, sys
from kvscope.memtrace.generator import GeneratorConfig, write_snapshot
path, steps, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
write_snapshot(GeneratorConfig(scenario="leak", steps=steps, seed=seed), path)
with open(path, "rb") as f:
    print(sum(len(t) for t in pickle.load(f)["device_traces"]))
"""


def ensure_snapshot(path: Path, entries: int, seed: int, env: dict[str, str]) -> int:
    """Generate the snapshot unless ``path`` already holds one with enough entries. This
    runs in a child process: a forked child's ``ru_maxrss`` starts from the parent's resident
    size, so the measuring parent must stay small."""
    meta = path.with_suffix(".entries")
    if path.is_file() and meta.is_file() and int(meta.read_text()) >= entries:
        return int(meta.read_text())
    # about 18.4 trace entries per decode step in the 'leak' scenario
    steps = int(entries / 18.0) + 1
    print(f"generating {path} ({steps} steps) ...", file=sys.stderr)
    out = subprocess.run(
        [sys.executable, "-c", GENERATE, str(path), str(steps), str(seed)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    n = int(out.stdout.split()[-1])
    meta.write_text(str(n))
    if n < entries:
        raise SystemExit(f"generated only {n} entries; raise --entries")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, default=Path("/tmp/kvscope_memtrace_bench.pickle"))
    ap.add_argument("--entries", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--skip-slow", action="store_true", help="skip torch trace / trace_plot")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="kvscope-bench-cache-")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "KVSCOPE_CACHE_DIR": cache}
    n = ensure_snapshot(args.file, args.entries, args.seed, env)
    f = str(args.file)
    py = sys.executable
    cli = [py, "-m", "kvscope.cli.main", "memtrace", "analyze", f, "--json"]
    viz = [py, "-m", "torch.cuda._memory_viz"]
    html = os.path.join(cache, "plot.html")
    runs: list[tuple[str, list[str], bool]] = [
        ("pickle.load", [py, "-c", PICKLE_LOAD, f], False),
        ("kvscope analyze (API, no cache)", [py, "-c", KVSCOPE_API, f, "nocache"], False),
        ("kvscope memtrace analyze --json (CLI, builds cache)", cli, True),
        ("kvscope memtrace analyze --json (CLI, from cache)", cli, False),
        ("kvscope analyze (API, from cache)", [py, "-c", KVSCOPE_API, f, "cache"], False),
        ("torch _memory_viz stats", [*viz, "stats", f], False),
    ]
    if not args.skip_slow:
        runs += [
            ("torch _memory_viz trace", [*viz, "trace", f], False),
            ("torch _memory_viz trace_plot", [*viz, "trace_plot", f, "-o", html], False),
        ]
    results: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        for name, cmd, fresh_cache in runs:
            if fresh_cache:
                for p in Path(cache).glob("memtrace/*"):
                    subprocess.run(["rm", "-rf", str(p)], check=True)
            print(f"  {name} ...", file=sys.stderr, flush=True)
            results.setdefault(name, []).append(measure(cmd, env))
    best = {k: {m: min(r[m] for r in v) for m in v[0]} for k, v in results.items()}
    size_mb = args.file.stat().st_size / 1e6
    load = os.getloadavg()[0]
    print(f"\nsnapshot: {f}  {n:,} trace entries  {size_mb:,.0f} MB  (best of {args.repeat})")
    print(f"1-minute load average at the end: {load:.1f} on {os.cpu_count()} CPUs")
    print(f"{'measurement':<54} {'wall s':>7} {'cpu s':>7} {'op s':>7} {'peak RSS MiB':>13}")
    for k, r in best.items():
        op = f"{r['op_s']:.2f}" if "op_s" in r else "-"
        print(f"{k:<54} {r['wall_s']:>7.2f} {r['cpu_s']:>7.2f} {op:>7} {r['rss_mib']:>13.0f}")
    floor = best["pickle.load"]
    full = best["kvscope analyze (API, no cache)"]
    cached_cli = best["kvscope memtrace analyze --json (CLI, from cache)"]
    stats = best["torch _memory_viz stats"]
    full_cli = best["kvscope memtrace analyze --json (CLI, builds cache)"]
    checks = {
        "full analysis / pickle.load (op s, target <= 1.3)": full["op_s"] / floor["op_s"],
        "full analysis / pickle.load (wall s, target <= 1.3)": full["wall_s"] / floor["wall_s"],
        "full analysis / pickle.load (cpu s, target <= 1.3)": full["cpu_s"] / floor["cpu_s"],
        "cached analysis, CLI wall s (target < 1)": cached_cli["wall_s"],
        "cached analysis, CLI cpu s (target < 1)": cached_cli["cpu_s"],
        "cached analysis, API op s (target < 1)": best["kvscope analyze (API, from cache)"]["op_s"],
        "kvscope CLI peak RSS / torch stats peak RSS (target <= 1)": max(
            full["rss_mib"], full_cli["rss_mib"]
        )
        / stats["rss_mib"],
        "torch stats wall / kvscope full wall": stats["wall_s"] / full_cli["wall_s"],
    }
    print()
    for k, v in checks.items():
        print(f"{k:<62} {v:6.2f}")
    if args.json:
        figures = {"entries": n, "runs": results, "checks": checks}
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
