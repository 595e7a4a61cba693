"""Differential fidelity: kvscope's vLLM-mode scheduler against vLLM 0.33.0's own, step by step.

Both sides get the same requests (arriving at the same step), token budget, max_num_seqs,
block size, block count and prefix-caching switch. vLLM's v1 ``Scheduler`` (with its
``KVCacheManager`` and ``BlockPool``) runs in a separate environment that has vLLM
(``--vllm-python``, default the venv ``scripts/build_vllm_oracle.sh`` builds, which
``make install-test`` runs) through ``benchmarks/vllm_oracle_driver.py``; each step's
output (one sampled token per request whose prefill is complete) is fed back. Compared per
step: requests scheduled and tokens each, blocks in use, requests admitted and their prefix
hits, preemptions, finished requests (so finish order too). Prints the first divergence.
A scenario with ``speculative`` settings (benchmarks/sim_scenarios_spec.py) also compares
the drafts each request verifies per step; vLLM gets kvscope's acceptance decisions.

Token ids for vLLM come from the workload's prefix hashes: a hashed block's tokens are drawn
from a generator seeded by its chained hash (equal hashes, equal tokens); everything else is
unique to the request. Run: ``PYTHONPATH=src python benchmarks/sim_vs_vllm.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.sim.engine import sequences_from
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout, WindowGroup
from kvscope.sim.scheduler import Scheduler, SchedulerConfig
from kvscope.sim.spec_decode import SpecDecodeConfig, apply_hash_lookahead
from kvscope.workload import Workload

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "vllm_oracle_driver.py"
VOCAB = 32000


def token_ids(seq: Any) -> list[int]:
    """Prompt tokens consistent with the sequence's chained hashes (see module docstring)."""
    toks: list[int] = []
    if seq.trace_hashes is not None:
        for h in seq.trace_hashes:
            rng = np.random.default_rng(int(h) & 0xFFFFFFFFFFFF)
            toks.extend(int(x) for x in rng.integers(10, VOCAB, seq.hash_block_size))
    rng = np.random.default_rng(10**9 + seq.index)
    toks.extend(int(x) for x in rng.integers(10, VOCAB, seq.prompt - len(toks)))
    return toks[: seq.prompt]


def layout_of(s: dict[str, Any]) -> KVLayout:
    """The simulator's layout for a scenario's ``groups`` (one full group when absent).

    The first group keeps full history (``full`` or ``mla``); every ``sliding`` or
    ``sliding_mla`` group becomes a :class:`WindowGroup` of its block size and window. When
    the first group slides, every group does: a layout without full history.
    """
    groups = s.get("groups")
    if not groups:
        return KVLayout(s["block_size"])
    full, *rest = groups
    if full["kind"].startswith("sliding"):  # window groups only (every layer slides)
        windows = tuple(
            WindowGroup(f"{g['kind']}{i}", g["block_size"], g["window"])
            for i, g in enumerate(groups)
        )
        return KVLayout(windows[0].block_tokens, windows, "sliding-only", full_history=False)
    assert full["kind"] in ("full", "mla"), "the first group keeps full history"
    windows = tuple(
        WindowGroup(f"{g['kind']}{i}", g["block_size"], g["window"]) for i, g in enumerate(rest)
    )
    return KVLayout(full["block_size"], windows, name="hybrid")


def spec_decode_for(s: dict[str, Any]) -> SpecDecodeConfig | None:
    """kvscope's speculative-decoding model for a scenario's ``speculative`` settings."""
    sd = s.get("speculative")
    if not sd:
        return None
    k = int(sd["num_speculative_tokens"])
    a = sd.get("acceptance", 0.0)
    return SpecDecodeConfig(
        method=sd.get("method", "mtp"),
        num_speculative_tokens=k,
        acceptance=tuple(float(x) for x in a) if isinstance(a, list) else (float(a),) * k,
        seed=int(sd.get("seed", 0)),
        parallel_drafting=bool(sd.get("parallel_drafting", False)),
    )


def run_sim(w: Workload, s: dict[str, Any]) -> list[dict[str, Any]]:
    """kvscope's scheduler driven exactly like the vLLM driver: arrivals by step index."""
    layout = layout_of(s)
    pool = PagedPool(s["num_blocks"], layout, enable_caching=s["enable_prefix_caching"])
    cfg = SchedulerConfig(
        max_num_seqs=s["max_num_seqs"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        max_model_len=s["max_model_len"],
        enable_chunked_prefill=s.get("enable_chunked_prefill", True),
        policy=s.get("policy", "fcfs"),
        long_prefill_token_threshold=s.get("long_prefill_token_threshold", 0),
    )
    sched = Scheduler(cfg, pool, spec_decode_for(s))
    seqs = sequences_from(w, layout.block_size)
    for q, p in zip(seqs, s.get("priorities", ()), strict=False):
        q.priority = int(p)
    if sched.spec is not None:
        shift = sched.spec.hash_lookahead(s["enable_prefix_caching"])
        apply_hash_lookahead(seqs, layout.block_size, shift)
    rows = []
    nxt = 0
    step = 0
    while nxt < len(seqs) or not sched.idle:
        while nxt < len(seqs) and seqs[nxt].arrival_s <= step:
            sched.add(seqs[nxt])
            nxt += 1
        before = {id(q) for q in sched.running}
        plan = sched.schedule(float(step))
        admitted = {q.request_id: q.computed - n for q, n in plan.scheduled if id(q) not in before}
        scheduled = sched.scheduled_tokens(plan)  # before update: members may join after it
        drafts = {q.request_id: q.step_drafts for q, _n in plan.scheduled if q.step_drafts}
        done = sched.update(plan, float(step))
        rows.append(
            {
                "step": step,
                "scheduled": scheduled,
                "used_blocks": pool.used,
                "preempted": sorted(q.request_id for q in plan.preempted),
                "finished": [q.request_id for q in done],
                "admitted": admitted,
                "running": len(sched.running),
                "waiting": sched.num_waiting,
            }
        )
        if sched.spec is not None:  # drafts verified (compared), acceptances (fed to vLLM)
            rows[-1].update(drafts=drafts, accepted=dict(sched.step_accepted))
        step += 1
    return rows


def vllm_requests(w: Workload, s: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenario's requests as the driver takes them (token ids, arrival step, priority)."""
    seqs = sequences_from(w, layout_of(s).block_size)
    prios = list(s.get("priorities", ())) + [0] * len(seqs)
    return [
        {
            "id": q.request_id,
            "arrival_step": int(q.arrival_s),
            "max_tokens": q.max_tokens,
            "tokens": token_ids(q),
            "priority": int(prios[i]),
        }
        for i, q in enumerate(seqs)
    ]


def run_vllm_many(
    cases: list[tuple[str, Workload, dict[str, Any]]], python: str
) -> dict[str, list[dict[str, Any]]]:
    """Every scenario through one driver process (vLLM is imported once): rows per scenario."""
    payload = {
        "scenarios": [{**s, "name": name, "requests": vllm_requests(w, s)} for name, w, s in cases]
    }
    proc = subprocess.run(
        [python, str(DRIVER)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONHASHSEED": "0"},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"vLLM driver failed:\n{proc.stderr[-3000:]}")
    out: dict[str, list[dict[str, Any]]] = {name: [] for name, _w, _s in cases}
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if row.get("end"):
            continue
        out[row.pop("scenario")].append(row)
    for rows in out.values():
        # vLLM's loop makes one extra empty schedule() call after the last request finishes
        while rows and not rows[-1]["scheduled"] and not rows[-1]["finished"]:
            rows.pop()
    return out


def run_vllm(w: Workload, s: dict[str, Any], python: str) -> list[dict[str, Any]]:
    return run_vllm_many([("one", w, s)], python)["one"]


FIELDS = ("scheduled", "used_blocks", "preempted", "finished", "admitted", "running", "waiting")


def compare(sim: list[dict[str, Any]], ref: list[dict[str, Any]]) -> str | None:
    for a, b in zip(sim, ref, strict=False):
        for f in FIELDS + (("drafts",) if "drafts" in a else ()):
            if a[f] != b[f]:
                return f"step {a['step']}: {f} differs\n  kvscope: {a[f]}\n  vLLM:    {b[f]}"
    if len(sim) != len(ref):
        return f"step counts differ: kvscope {len(sim)}, vLLM {len(ref)}"
    return None


def synthetic(seed: int, n: int, shared: bool, max_prompt: int, max_out: int) -> Workload:
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(0, 4, n)).astype(np.float64)
    prompts = rng.integers(1, max_prompt, n)
    outputs = rng.integers(1, max_out, n)
    off = vals = None
    if shared:  # a few prefix families: block ids drawn from a tiny alphabet
        lens = prompts // 16
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        vals = rng.integers(0, 2, int(off[-1]))
    return Workload.build(
        steps,
        prompts,
        outputs,
        hash_offsets=off,
        hash_values=vals,
        hash_block_size=16 if shared else None,
    )


def mooncake(path: Path, n: int, step_s: float, s: dict[str, Any]) -> Workload:
    """The first ``n`` requests that can ever run in the pool, arrivals in steps of step_s.

    A request whose prompt exceeds max_model_len is refused by vLLM's input processor, and
    one that can never fit the pool would block vLLM's FCFS queue for ever (kvscope rejects
    it with a reason instead), so both are left out of the comparison.
    """
    w = Workload.from_file(path).shift_to_zero()
    need = -(-np.minimum(w.prompt_tokens + w.output_tokens, s["max_model_len"]) // s["block_size"])
    ok = (w.prompt_tokens < s["max_model_len"]) & (need <= s["num_blocks"] - 1)
    w = w.take(np.flatnonzero(ok)[:n])
    return w.replace(arrival_s=np.floor(w.arrival_s / step_s))


def identical_prompts(seed: int, n: int, blocks: int, max_out: int) -> Workload:
    """``n`` requests with the very same block-aligned prompt (``blocks`` blocks of 16)."""
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(0, 3, n)).astype(np.float64)
    off = np.arange(n + 1, dtype=np.int64) * blocks
    vals = np.tile(np.arange(blocks, dtype=np.int64) + 7, n)
    return Workload.build(
        steps,
        np.full(n, blocks * 16),
        rng.integers(20, max_out, n),
        hash_offsets=off,
        hash_values=vals,
        hash_block_size=16,
    )


def base_scenarios(shared: Path | None) -> list[tuple[str, Workload, dict[str, Any]]]:
    """Full-attention scenarios: FCFS and priority, caching on and off, the edge cases."""
    base = {
        "block_size": 16,
        "max_model_len": 32768,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 256,
        "enable_prefix_caching": True,
    }
    rng = np.random.default_rng(42)
    out = [
        ("synthetic", synthetic(1, 80, False, 400, 100), {**base, "num_blocks": 400}),
        (
            "synthetic, no caching",
            synthetic(2, 80, False, 400, 100),
            {**base, "num_blocks": 400, "enable_prefix_caching": False},
        ),
        ("preemption-forcing", synthetic(3, 60, False, 300, 300), {**base, "num_blocks": 90}),
        (
            "preemption, no caching",
            synthetic(4, 60, False, 300, 300),
            {**base, "num_blocks": 90, "enable_prefix_caching": False},
        ),
        ("shared prefixes", synthetic(5, 80, True, 400, 80), {**base, "num_blocks": 150}),
        (
            "shared prefixes, tiny pool",
            synthetic(6, 60, True, 300, 200),
            {**base, "num_blocks": 70, "max_num_seqs": 8},
        ),
        # arrival steps tie often (increments of 0): vLLM's order is (priority, arrival), and a
        # live server stamps arrivals in the order requests come, so the newest goes first
        (
            "priority with ties, preemption storm",
            synthetic(7, 70, False, 300, 300),
            {
                **base,
                "num_blocks": 80,
                "policy": "priority",
                "priorities": rng.integers(0, 3, 70).tolist(),
            },
        ),
        (
            "priority with ties, shared prefixes",
            synthetic(8, 70, True, 300, 200),
            {
                **base,
                "num_blocks": 70,
                "policy": "priority",
                "priorities": rng.integers(0, 2, 70).tolist(),
            },
        ),
        (
            "priority, all equal",
            synthetic(9, 60, False, 300, 300),
            {**base, "num_blocks": 90, "policy": "priority", "enable_prefix_caching": False},
        ),
        # the threshold is lifted when a request is alone (nobody to starve)
        (
            "long-prefill threshold, sparse arrivals",
            Workload.build(np.arange(12) * 40.0, np.full(12, 700), np.full(12, 8)),
            {**base, "num_blocks": 400, "long_prefill_token_threshold": 64},
        ),
        (
            "long-prefill threshold, busy",
            synthetic(10, 60, False, 600, 60),
            {**base, "num_blocks": 300, "long_prefill_token_threshold": 96},
        ),
        # prompt + output - 1 = the pool's token capacity: the last token never gets a slot
        (
            "request exactly filling the pool",
            Workload.build([0.0, 1.0, 2.0], [100, 60, 100], [61, 40, 61]),
            {**base, "num_blocks": 11},
        ),
        # identical block-aligned prompts: outputs must not share blocks between requests
        (
            "identical block-aligned prompts",
            identical_prompts(11, 30, 4, 120),
            {**base, "num_blocks": 200},
        ),
        (
            "identical prompts, preempting",
            identical_prompts(12, 30, 6, 200),
            {**base, "num_blocks": 60, "max_num_seqs": 8},
        ),
        (
            "chunked prefill off",
            synthetic(13, 50, True, 250, 80),
            {
                **base,
                "num_blocks": 120,
                "enable_chunked_prefill": False,
                "max_model_len": 1024,
                "max_num_batched_tokens": 1024,
            },
        ),
        (
            "max_num_seqs 1, budget below the block size",
            synthetic(14, 20, False, 120, 30),
            {**base, "num_blocks": 60, "max_num_seqs": 1, "max_num_batched_tokens": 8},
        ),
    ]
    if shared is not None:
        trace = shared / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
        if trace.is_file():
            s = {**base, "num_blocks": 3000, "max_num_batched_tokens": 2048, "max_num_seqs": 32}
            out.append(("Mooncake conversation slice", mooncake(trace, 40, 0.05, s), s))
    return out


#: Modules beside this one that add scenario families (each has ``scenarios(shared)``).
FAMILIES = ("sim_scenarios_hybrid", "sim_scenarios_spec")


def scenarios(shared: Path | None) -> list[tuple[str, Workload, dict[str, Any]]]:
    """Every scenario: the full-attention ones plus each family module's."""
    import importlib

    out = base_scenarios(shared)
    sys.path.insert(0, str(HERE))
    for mod in FAMILIES:
        try:
            fam = importlib.import_module(mod)
        except ModuleNotFoundError:
            continue
        out.extend(fam.scenarios(shared))
    return out


def check(
    cases: list[tuple[str, Workload, dict[str, Any]]], python: str
) -> list[tuple[str, int, int, int, float, str | None]]:
    """(name, steps, preemptions, hit tokens, kvscope seconds, first divergence) per case."""
    ref = run_vllm_many(cases, python)
    rows = []
    for name, w, s in cases:
        t0 = time.perf_counter()
        sim = run_sim(w, s)
        t_sim = time.perf_counter() - t0
        pre = sum(len(r["preempted"]) for r in sim)
        hits = sum(sum(r["admitted"].values()) for r in sim)
        rows.append((name, len(sim), pre, hits, t_sim, compare(sim, ref[name])))
    return rows


def default_python() -> str:
    """The oracle venv scripts/build_vllm_oracle.sh builds (KVSCOPE_VLLM_PYTHON overrides)."""
    env = os.environ.get("KVSCOPE_VLLM_PYTHON")
    if env:
        return env
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return str(cache / "kvscope" / "vllm-oracle-0.33.0" / "bin" / "python")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=default_python())
    ap.add_argument("--shared", type=Path, default=HERE.parent.parent / "shared")
    ap.add_argument("--only", default=None, help="run scenarios whose name contains this")
    args = ap.parse_args()
    if not Path(args.vllm_python).exists():
        raise SystemExit(f"no vLLM environment at {args.vllm_python}; make install-test builds it")
    shared = args.shared if args.shared.is_dir() else None
    cases = [c for c in scenarios(shared) if not args.only or args.only in c[0]]
    t0 = time.perf_counter()
    results = check(cases, args.vllm_python)
    failures = 0
    print(f"{'scenario':46} {'steps':>6} {'preempt':>8} {'hit tok':>8} {'result':>10}")
    for name, steps, pre, hits, t_sim, diff in results:
        verdict = "identical" if diff is None else "DIVERGED"
        print(f"{name:46} {steps:>6} {pre:>8} {hits:>8} {verdict:>10}  (kvscope {t_sim:.2f} s)")
        if diff:
            failures += 1
            print("  first divergence: " + diff)
    same = len(results) - failures
    print(f"{same} of {len(results)} scenarios identical ({time.perf_counter() - t0:.0f} s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
