"""Score cost coefficients on a measured run: replay its workload, compare latency percentiles.

A measured run (``requests.parquet`` of ``kvscope bench``, or of ``kvscope simulate``) is
replayed through the simulator with the same arrivals (the time each request reached the
server: the bench's ``sent_s``, else ``arrival_s``), prompt and output lengths, and its
TTFT, TPOT, ITL and E2E percentiles (P50, P90, P99, seconds) are compared with the measured
ones. Measured latencies count from the same instant (``sent_s`` when the run has it);
only ``measure``-phase requests are scored when the bench recorded warm-up and cool-down.
Measured ITL is the gap between streamed chunks (``chunks.parquet``); simulated ITL is the
duration of each engine step, once per request that decoded in it. Errors are relative:
``simulated / measured - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvscope.errors import KvscopeError

F64 = NDArray[np.float64]
METRICS = ("ttft", "tpot", "itl", "e2e")
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Score:
    """One held-out run's comparison: rows of (metric, percentile, measured, simulated)."""

    run_dir: str
    requests: int
    rows: tuple[tuple[str, int, float, float], ...]

    def error(self, metric: str, pct: int) -> float:
        for m, p, meas, sim in self.rows:
            if m == metric and p == pct:
                return sim / meas - 1.0 if meas > 0 else float("nan")
        raise KeyError((metric, pct))

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "requests": self.requests,
            "rows": [
                {
                    "metric": m,
                    "percentile": p,
                    "measured_s": meas,
                    "simulated_s": sim,
                    "error": sim / meas - 1.0 if meas > 0 else None,
                }
                for m, p, meas, sim in self.rows
            ],
        }


def _columns(table: Any) -> dict[str, Any]:
    return {
        n: np.asarray(table.column(n).to_numpy(zero_copy_only=False)) for n in table.column_names
    }


def _served_mask(col: dict[str, Any]) -> Any:
    """Requests the server handled to the end (what a replay reproduces)."""
    return (col["status"] == "ok") & np.isfinite(col["finish_s"].astype(np.float64))


def _start(col: dict[str, Any]) -> F64:
    """When each request reached the server: the bench's send time, else its arrival."""
    key = "sent_s" if "sent_s" in col else "arrival_s"
    out: F64 = col[key].astype(np.float64)
    return out


def replay_workload(table: Any) -> Any:
    """The workload a measured run served: its completed requests at their send times."""
    from kvscope.workload import Workload

    col = _columns(table)
    ok = _served_mask(col)
    start = _start(col)[ok]
    return Workload.build(
        start,
        col["prompt_tokens"][ok].astype(np.int64),
        np.maximum(col["output_tokens"][ok].astype(np.int64), 1),
        request_ids=col["request_id"][ok],
        spec={"replay_of": "measured run"},
    )


def _scored_ids(col: dict[str, Any]) -> Any:
    ok = _served_mask(col)
    if "phase" in col:
        ok &= col["phase"] == "measure"
    return ok


def measured_latencies(run_dir: Path, table: Any) -> dict[str, F64]:
    """TTFT, TPOT, E2E per scored request and the run's ITL gaps, in seconds."""
    from kvscope.results import read_table

    col = _columns(table)
    keep = _scored_ids(col)
    start = _start(col)
    first = col["first_token_s"].astype(np.float64)
    fin = col["finish_s"].astype(np.float64)
    out = {
        "ttft": (first - start)[keep],
        "tpot": col["tpot_s"].astype(np.float64)[keep],
        "e2e": (fin - start)[keep],
    }
    chunks = (
        read_table(run_dir.absolute(), "chunks") if (run_dir / "chunks.parquet").is_file() else None
    )
    gaps: list[F64] = []
    if chunks is not None and "chunk_times_s" in chunks.column_names:
        wanted = set(col["request_id"][keep].tolist())
        ids = chunks.column("request_id").to_pylist()
        for rid, times in zip(ids, chunks.column("chunk_times_s").to_pylist(), strict=True):
            if rid in wanted and times and len(times) > 1:
                gaps.append(np.diff(np.asarray(times, dtype=np.float64)))
    out["itl"] = np.concatenate(gaps) if gaps else np.zeros(0)
    return out


def simulated_latencies(result: Any, scored_ids: set[str]) -> dict[str, F64]:
    """The same figures from a simulation (run in step mode, every step sampled)."""
    col = _columns(result.requests)
    keep = np.isin(col["request_id"], list(scored_ids)) & (col["status"] == "ok")
    start = col["arrival_s"].astype(np.float64)
    out = {
        "ttft": (col["first_token_s"].astype(np.float64) - start)[keep],
        "tpot": col["tpot_s"].astype(np.float64)[keep],
        "e2e": (col["finish_s"].astype(np.float64) - start)[keep],
    }
    steps = result.steps
    dt = np.asarray(steps.column("step_time_s").to_numpy(), dtype=np.float64)
    dec = np.asarray(steps.column("decode_tokens").to_numpy(), dtype=np.int64)
    n = np.asarray(steps.column("steps").to_numpy(), dtype=np.int64)
    one = n == 1  # rows that are one step each (step mode, interval 0: all of them)
    out["itl"] = np.repeat(dt[one], np.maximum(dec[one], 0))
    return out


def _pct(values: F64, p: int) -> float:
    v = values[np.isfinite(values)]
    return float(np.percentile(v, p)) if v.size else float("nan")


@dataclass(frozen=True)
class ReplayCase:
    """A measured run ready to replay: its workload, the requests scored, measured figures."""

    run_dir: Path
    workload: Any
    scored: frozenset[str]
    measured: dict[str, F64]

    @classmethod
    def of(cls, run_dir: Path, table: Any) -> ReplayCase:
        col = _columns(table)
        scored = frozenset(col["request_id"][_scored_ids(col)].tolist())
        if not scored:
            raise KvscopeError(f"{run_dir}: no completed requests to score the fit on.")
        return cls(run_dir, replay_workload(table), scored, measured_latencies(run_dir, table))

    def simulate(self, cfg: Any, coef_file: str, itl: bool = True) -> dict[str, F64]:
        """Replay latencies; ITL needs every step sampled (step mode), the rest do not."""
        from kvscope.sim.run import simulate

        mode = {"mode": "step", "sample_interval_s": 0.0} if itl else {"mode": "span"}
        sim_cfg = replace(cfg, cost_file=coef_file, **mode)
        return simulated_latencies(simulate(self.workload, sim_cfg), set(self.scored))

    def score(self, cfg: Any, coef_file: str) -> Score:
        sim = self.simulate(cfg, coef_file)
        rows = tuple(
            (m, p, _pct(self.measured[m], p), _pct(sim[m], p)) for m in METRICS for p in PERCENTILES
        )
        return Score(str(self.run_dir), len(self.scored), rows)


def score_run(run_dir: Path, table: Any, cfg: Any, coef_file: str) -> Score:
    """Replay ``run_dir``'s workload on ``cfg`` with the coefficients in ``coef_file``."""
    return ReplayCase.of(run_dir, table).score(cfg, coef_file)


#: What the replay refinement matches, with weights: the medians the acceptance targets first,
#: the P90s lightly (on a shared host they are the first to carry other processes' noise);
#: P99s are left to score the fit, not to make it.
REFINE_TARGETS = (
    ("ttft", 50, 1.0),
    ("tpot", 50, 1.0),
    ("e2e", 50, 0.5),
    ("ttft", 90, 0.25),
    ("tpot", 90, 0.25),
)


#: The refinement's coordinates, in order: (field, floor, ceiling). A coordinate the
#: regression left at 0 starts at its floor, which stands for 0 on the log scale.
REFINE_FIELDS = (
    ("overhead_s", 1e-6, float("inf")),
    ("mfu", 1e-4, 1.0),
    ("mbu", 1e-4, 1.0),
    ("decode_token_s", 1e-7, float("inf")),
    ("request_s", 1e-6, float("inf")),
)


def refine_by_replay(
    cases: list[ReplayCase], cfg: Any, start: Any, scratch: Path, rounds: int = 10
) -> tuple[Any, float]:
    """Pattern search (log steps, halved when no move helps) over overhead, MFU, MBU, the
    per-decode-token cost and the per-request latency from ``start``, minimising the weighted
    squared log error between the replays' and the measured percentiles of
    :data:`REFINE_TARGETS`. Deterministic. Returns the coefficients and their error."""
    path = str(scratch / "refine-cost.json")
    want = [[(w, _pct(c.measured[m], p)) for m, p, w in REFINE_TARGETS] for c in cases]
    names = [f for f, _lo, _hi in REFINE_FIELDS]

    def coef_of(x: list[float]) -> Any:
        return replace(start, **dict(zip(names, x, strict=True)))

    def loss(x: list[float]) -> float:
        coef_of(x).save(path)
        total = 0.0
        for case, targets in zip(cases, want, strict=True):
            sim = case.simulate(cfg, path, itl=False)
            for (m, p, _w), (w, meas) in zip(REFINE_TARGETS, targets, strict=True):
                got = _pct(sim[m], p)
                if meas > 0 and got > 0:
                    total += w * float(np.log(got / meas)) ** 2
        return total

    x = [max(float(getattr(start, f)), lo) for f, lo, _hi in REFINE_FIELDS]
    best = loss(x)
    step = 1.0  # natural-log step: x e^{+-step}
    for _ in range(rounds):
        moved = False
        for k, (_f, lo, hi) in enumerate(REFINE_FIELDS):
            for sign in (1.0, -1.0):
                y = list(x)
                y[k] = max(float(min(y[k] * np.exp(sign * step), hi)), lo)
                if y[k] == x[k]:
                    continue
                err = loss(y)
                if err < best:
                    best, x, moved = err, y, True
                    break
        if not moved:
            step /= 2
            if step < 0.02:
                break
    return coef_of(x), best


def _ms(v: float) -> str:
    return f"{v * 1e3:>9.2f}ms" if np.isfinite(v) else f"{'n/a':>11}"


def format_scores(scores: list[tuple[str, Score]]) -> str:
    """A plain table: label, metric, percentile, measured, simulated, error."""
    head = f"{'run':<24} {'metric':<6} {'pct':>4} {'measured':>11} {'simulated':>11} {'error':>8}"
    lines = [head]
    for label, s in scores:
        for m, p, meas, sim in s.rows:
            ok = meas > 0 and np.isfinite(sim)
            err = f"{sim / meas - 1.0:>+8.1%}" if ok else f"{'n/a':>8}"
            lines.append(f"{label[-24:]:<24} {m:<6} {'P' + str(p):>4} {_ms(meas)} {_ms(sim)} {err}")
    return "\n".join(lines)
