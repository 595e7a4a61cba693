"""Differential fidelity: kvscope's vLLM-mode scheduler against vLLM 0.33.0's own, step by step.

Both sides get the same requests (arriving at the same step), token budget, max_num_seqs,
block size, block count and prefix-caching switch. vLLM's v1 ``Scheduler`` (with its
``KVCacheManager`` and ``BlockPool``) runs in a separate environment that has vLLM
(``--vllm-python``, default /work/vllm-oracle-venv/bin/python; recipe in
shared/reference/cpu_engines.md) through ``benchmarks/vllm_oracle_driver.py``; each step's
output (one sampled token per request whose prefill is complete) is fed back. Compared per
step: requests scheduled and tokens each, blocks in use, requests admitted and their prefix
hits, preemptions, finished requests (so finish order too). Prints the first divergence.

Token ids for vLLM come from the workload's prefix hashes: a hashed block's tokens are drawn
from a generator seeded by its chained hash (equal hashes, equal tokens); everything else is
unique to the request. Run: ``PYTHONPATH=src python benchmarks/sim_vs_vllm.py``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.sim.engine import sequences_from
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout
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
    layout = KVLayout(s["block_size"])
    pool = PagedPool(s["num_blocks"], layout, enable_caching=s["enable_prefix_caching"])
    cfg = SchedulerConfig(
        max_num_seqs=s["max_num_seqs"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        max_model_len=s["max_model_len"],
    )
    sched = Scheduler(cfg, pool, spec_decode_for(s))
    seqs = sequences_from(w, layout.block_size)
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


def run_vllm(w: Workload, s: dict[str, Any], python: str) -> list[dict[str, Any]]:
    seqs = sequences_from(w, s["block_size"])
    reqs = [
        {
            "id": q.request_id,
            "arrival_step": int(q.arrival_s),
            "max_tokens": q.max_tokens,
            "tokens": token_ids(q),
        }
        for q in seqs
    ]
    proc = subprocess.run(
        [python, str(DRIVER)],
        input=json.dumps({**s, "requests": reqs}),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"vLLM driver failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    # vLLM's loop makes one extra empty schedule() call after the last request finishes
    while rows and not rows[-1]["scheduled"] and not rows[-1]["finished"]:
        rows.pop()
    return rows


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


def scenarios(shared: Path | None) -> list[tuple[str, Workload, dict[str, Any]]]:
    base = {
        "block_size": 16,
        "max_model_len": 32768,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 256,
        "enable_prefix_caching": True,
    }
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
    ]
    if shared is not None:
        trace = shared / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
        if trace.is_file():
            s = {**base, "num_blocks": 3000, "max_num_batched_tokens": 2048, "max_num_seqs": 32}
            out.append(("Mooncake conversation slice", mooncake(trace, 40, 0.05, s), s))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default="/work/vllm-oracle-venv/bin/python")
    ap.add_argument("--shared", type=Path, default=HERE.parent.parent / "shared")
    ap.add_argument("--only", default=None, help="run scenarios whose name contains this")
    args = ap.parse_args()
    if not Path(args.vllm_python).exists():
        raise SystemExit(f"no vLLM environment at {args.vllm_python}; see cpu_engines.md")
    shared = args.shared if args.shared.is_dir() else None
    failures = 0
    print(f"{'scenario':32} {'steps':>6} {'preempt':>8} {'hit tok':>8} {'result':>10}")
    for name, w, s in scenarios(shared):
        if args.only and args.only not in name:
            continue
        t0 = time.perf_counter()
        sim = run_sim(w, s)
        t_sim = time.perf_counter() - t0
        ref = run_vllm(w, s, args.vllm_python)
        diff = compare(sim, ref)
        pre = sum(len(r["preempted"]) for r in sim)
        hits = sum(sum(r["admitted"].values()) for r in sim)
        verdict = "identical" if diff is None else "DIVERGED"
        print(f"{name:32} {len(sim):>6} {pre:>8} {hits:>8} {verdict:>10}  (kvscope {t_sim:.2f} s)")
        if diff:
            failures += 1
            print("  first divergence: " + diff)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
