"""Fit the cost model's coefficients (overhead, MFU, MBU) from a measured run directory.

Input: a run directory with ``requests.parquet`` (the shared request schema that
``kvscope bench`` and ``kvscope simulate`` write). For each completed request with at least
two output tokens, its mean decode step time is its TPOT; the batch it decoded in is
reconstructed at the midpoint of its decode phase from all requests' timestamps (who was
running, and how far each had got: context = prompt + output x elapsed fraction), and the
prefill tokens of requests whose first token came inside its decode phase are spread over its
decode steps (chunked prefill shares those steps with the decodes). The fit
minimises the squared log error between observed TPOT and the model's decode step time over a
coarse-to-fine grid of (MFU, MBU), the overhead being the median residual for each pair:
deterministic and free of optimiser dependencies.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvscope.errors import KvscopeError
from kvscope.results import read_table
from kvscope.sim.calibrate_samples import (
    PREFILL_FIELDS,
    DecodeSamples,
    PrefillSamples,
    decode_samples,
    prefill_samples,
)
from kvscope.sim.cost import CostCoefficients, CostModel, HardwareTerms

F64 = NDArray[np.float64]


@dataclass(frozen=True)
class Fit:
    coefficients: CostCoefficients
    report: dict[str, Any]


def _linear_terms(base: F64, y: F64, w: F64, cols: list[F64]) -> list[float]:
    """Non-negative coefficients c minimising sum w((base + sum_k c_k cols_k)/y - 1)^2: the
    least-squares solution on each subset of the columns (the rest held at 0), the best one
    whose coefficients are all non-negative (at most 3 columns: 7 small solves)."""
    r = (y - base) / y
    xs = [c / y for c in cols]
    best: tuple[float, list[float]] = (float(np.sum(w * r * r)), [0.0] * len(cols))
    for mask in range(1, 1 << len(cols)):
        use = [k for k in range(len(cols)) if mask >> k & 1]
        m = np.array([[np.sum(w * xs[i] * xs[j]) for j in use] for i in use])
        v = np.array([np.sum(w * xs[i] * r) for i in use])
        try:
            sol = np.linalg.solve(m, v)
        except np.linalg.LinAlgError:
            continue
        if not np.all(np.isfinite(sol)) or np.any(sol < 0):
            continue
        coef = [0.0] * len(cols)
        for k, c in zip(use, sol, strict=True):
            coef[k] = float(c)
        resid = r - sum(c * x for c, x in zip(coef, xs, strict=True))
        err = float(np.sum(w * resid * resid))
        if err < best[0]:
            best = (err, coef)
    return best[1]


def fit_coefficients(
    terms: HardwareTerms, data: DecodeSamples, prefill: PrefillSamples | None = None
) -> tuple[CostCoefficients, float]:
    """Grid-search (MFU, MBU); for each pair the per-step overhead (and, when prefill samples
    separate a decoded token from a prompt token, the per-decode-token host cost) by weighted
    least squares on relative error. Decode and prefill samples weigh half each. Returns the
    coefficients and the in-sample TPOT MAPE."""
    y = data.tpot
    n_dec = len(y)
    w_dec = np.full_like(y, 1.0 / n_dec)
    # The linear terms: the per-step overhead (1.5 steps for a prompt that waited on a step in
    # flight), the per-decoded-token host cost, and, on TTFT only, the per-request latency.
    cols = [np.ones_like(y), data.batch]
    if prefill is not None:
        y = np.concatenate([y, prefill.ttft])
        cols = [
            np.concatenate([cols[0], np.where(prefill.batch > 0, 1.5, 1.0)]),
            np.concatenate([cols[1], 1.5 * prefill.batch]),
            np.concatenate([np.zeros(n_dec), np.ones_like(prefill.ttft)]),
        ]
        w = np.concatenate([0.5 * w_dec, np.full(len(prefill.ttft), 0.5 / len(prefill.ttft))])
    else:
        cols, w = cols[:1], w_dec

    def base_of(mfu: float, mbu: float) -> F64:
        model = CostModel(terms, CostCoefficients(0.0, mfu, mbu))
        parts = [data.predict(model)]
        if prefill is not None:
            parts.append(prefill.predict(model))
        return np.concatenate(parts)

    def score(mfu: float, mbu: float) -> tuple[float, list[float]]:
        base = base_of(mfu, mbu)
        lin = _linear_terms(base, y, w, cols)
        pred = np.maximum(base + sum(c * x for c, x in zip(lin, cols, strict=False)), 1e-12)
        return float(np.sum(w * np.log(pred / y) ** 2)), lin

    best: tuple[float, float, float, list[float]] = (np.inf, 0.5, 0.5, [0.0] * len(cols))
    grid = np.geomspace(0.002, 1.0, 28)
    for mfu in grid:
        for mbu in grid:
            err, lin = score(float(mfu), float(mbu))
            if err < best[0]:
                best = (err, float(mfu), float(mbu), lin)
    for _ in range(2):  # refine around the best point
        _, m0, b0, _ = best
        for mfu in np.clip(m0 * np.geomspace(0.8, 1.25, 11), 1e-4, 1.0):
            for mbu in np.clip(b0 * np.geomspace(0.8, 1.25, 11), 1e-4, 1.0):
                err, lin = score(float(mfu), float(mbu))
                if err < best[0]:
                    best = (err, float(mfu), float(mbu), lin)
    _, mfu, mbu, lin = best
    ov, d, req = [*lin, 0.0, 0.0][:3]
    coef = CostCoefficients(
        ov,
        mfu,
        mbu,
        source="fitted by kvscope simulate --calibrate",
        decode_token_s=d,
        request_s=req,
    )
    pred = data.predict(CostModel(terms, coef))
    mape = float(np.mean(np.abs(pred - data.tpot) / data.tpot))
    return coef, mape


#: The requests-table columns a fit reads, and whether each is text (else a number).
NEEDED_COLUMNS = {
    "status": True,
    "output_tokens": False,
    "prompt_tokens": False,
    "cached_prompt_tokens": False,
    "first_scheduled_s": False,
    "first_token_s": False,
    "finish_s": False,
    "tpot_s": False,
}


def load_requests(run_dir: Path) -> Any:
    """The run directory's requests table, checked: a corrupt, truncated or foreign file is
    one error line naming it, never a pyarrow traceback."""
    import pyarrow as pa

    try:
        mode: int | None = run_dir.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as err:  # a name too long, no permission: Path.is_dir would raise
        raise KvscopeError(f"{run_dir}: cannot read ({err.strerror or err}).") from None
    if mode is None or not stat.S_ISDIR(mode):
        what = "no such directory" if mode is None else "not a directory"
        raise KvscopeError(
            f"{run_dir}: {what}; expected a bench run directory (with requests.parquet)."
        )
    try:
        # absolute: pyarrow would take a relative "file:/x" or "s3:/x" for a URI
        table = read_table(run_dir.absolute(), "requests")
    except (pa.ArrowException, OSError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise KvscopeError(
            f"{run_dir / 'requests.parquet'}: not a readable requests table ({reason})."
        ) from None
    if table is None:
        raise KvscopeError(f"{run_dir}: no requests.parquet; is this a bench run directory?")
    for name, text in NEEDED_COLUMNS.items():
        if name not in table.column_names:
            raise KvscopeError(
                f"{run_dir / 'requests.parquet'}: no '{name}' column; not a kvscope requests table."
            )
        typ = table.schema.field(name).type
        t = pa.types
        ok = (
            (t.is_string(typ) or t.is_large_string(typ))
            if text
            else (t.is_integer(typ) or t.is_floating(typ))
        )
        if not ok:
            raise KvscopeError(
                f"{run_dir / 'requests.parquet'}: column '{name}' holds {typ}, expected "
                f"{'text' if text else 'numbers'}."
            )
    return table


def calibrate_run_dir(run_dir: Path, cfg: Any) -> Fit:
    """Fit coefficients for the deployment ``cfg`` (a SimConfig) from ``run_dir``."""
    from kvscope.sim.run import build_pool

    table = load_requests(Path(run_dir))
    _pool, _layout, terms, info = build_pool(cfg)
    coef, mape, used = fit_tables([(Path(run_dir), table)], terms, int(info["max_num_seqs"]))
    coef = replace(coef, source="fitted by kvscope simulate --calibrate")
    return Fit(coef, {"requests_used": used, "tpot_mape": mape, "run_dir": str(run_dir)})


@dataclass(frozen=True)
class Calibration:
    """A fit over several measured runs and its scores on runs it did not see."""

    coefficients: CostCoefficients
    report: dict[str, Any]
    #: (label, score) per held-out run: ``--holdout`` runs, else leave-one-out folds.
    scores: tuple[tuple[str, Any], ...]


def fit_tables(
    tables: list[tuple[Path, Any]], terms: HardwareTerms, slots: int
) -> tuple[CostCoefficients, float, int]:
    """One fit over the decode (and prefill) samples of every table; ``slots`` is the most
    requests the engine runs at once. Returns coefficients, TPOT MAPE, decode samples used."""
    parts = [decode_samples(t) for _p, t in tables]
    owners, offset = [], 0
    for d in parts:
        owners.append(d.prefill_owner + offset)
        offset += len(d.tpot)
    data = DecodeSamples(
        np.concatenate([d.batch for d in parts]),
        np.concatenate([d.ctx for d in parts]),
        np.concatenate([d.tpot for d in parts]),
        np.concatenate([d.steps for d in parts]),
        np.concatenate(owners),
        np.concatenate([d.prefill_tokens for d in parts]),
    )
    pre = [p for p in (prefill_samples(t, slots) for _p, t in tables) if p is not None]
    prefill = (
        PrefillSamples(*(np.concatenate([getattr(p, f) for p in pre]) for f in PREFILL_FIELDS))
        if pre
        else None
    )
    coef, mape = fit_coefficients(terms, data, prefill)
    runs = ", ".join(str(p) for p, _t in tables)
    return replace(coef, source=f"fitted by kvscope calibrate on {runs}"), mape, len(data.tpot)


def calibrate_runs(
    run_dirs: list[Path],
    cfg: Any,
    *,
    holdout: list[Path] | None = None,
    min_requests: int = 10,
    scratch: Path | None = None,
    refine: bool = True,
) -> Calibration:
    """Fit the cost coefficients of deployment ``cfg`` (a SimConfig) on ``run_dirs`` and score
    the fit on ``holdout`` runs (replayed through the simulator), or, with no holdout and
    several runs, leave-one-out: each run is scored with a fit on the others. The returned
    coefficients are always the fit on every run of ``run_dirs``.

    With ``refine``, the regression fit is then adjusted by replaying the fit runs
    (:func:`kvscope.sim.holdout.refine_by_replay`): the simulated TTFT and TPOT percentiles
    are matched to the measured ones, which absorbs what the step-time regression cannot see
    (queueing in front of the engine, time between steps)."""
    import tempfile

    from kvscope.sim.holdout import ReplayCase, refine_by_replay
    from kvscope.sim.run import build_pool

    if not run_dirs:
        raise KvscopeError("calibration needs at least one bench run directory.")
    held = list(holdout or [])
    tables = [(Path(d), load_requests(Path(d))) for d in [*run_dirs, *held]]
    for path, table in tables:
        done = int(np.sum(np.asarray(table.column("status").to_pylist(), dtype=object) == "ok"))
        if done < min_requests:
            raise KvscopeError(
                f"{path}: {done} completed requests; calibration needs at least {min_requests}."
            )
    fit_data, held_tables = tables[: len(run_dirs)], tables[len(run_dirs) :]
    _pool, _layout, terms, info = build_pool(cfg)
    slots = int(info["max_num_seqs"])
    cases = {p: ReplayCase.of(p, t) for p, t in tables}
    scores: list[tuple[str, Any]] = []
    refined: float | None = None
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:

        def fit(data: list[tuple[Path, Any]]) -> tuple[CostCoefficients, float, int, float | None]:
            c, m, u = fit_tables(data, terms, slots)
            if not refine:
                return c, m, u, None
            r, err = refine_by_replay([cases[p] for p, _t in data], cfg, c, Path(tmp))
            return replace(r, source=c.source + " (refined by replay)"), m, u, err

        coef, mape, used, refined = fit(fit_data)
        cost = str(Path(tmp) / "cost.json")
        if held_tables:
            coef.save(cost)
            scores = [(f"holdout {p.name}", cases[p].score(cfg, cost)) for p, _t in held_tables]
        elif len(fit_data) > 1:
            for k, (p, _t) in enumerate(fit_data):
                fold = fit(fit_data[:k] + fit_data[k + 1 :])[0]
                fold.save(cost)
                scores.append((f"leave-out {p.name}", cases[p].score(cfg, cost)))
    report = {
        "runs": [str(p) for p, _t in fit_data],
        "holdout": [str(p) for p, _t in held_tables],
        "requests_used": used,
        "tpot_mape": mape,
        "replay_error": refined,
        "scores": [{"label": label, **s.as_dict()} for label, s in scores],
    }
    return Calibration(coef, report, tuple(scores))
