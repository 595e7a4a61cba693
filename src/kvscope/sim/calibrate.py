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
from kvscope.sim.cost import CostCoefficients, CostModel, HardwareTerms

F64 = NDArray[np.float64]


@dataclass(frozen=True)
class Fit:
    coefficients: CostCoefficients
    report: dict[str, Any]


@dataclass(frozen=True)
class DecodeSamples:
    """Per sampled request: decode batch, context, TPOT, and the prefills inside its decode."""

    batch: F64
    ctx: F64
    tpot: F64
    steps: F64
    prefill_owner: NDArray[np.int64]  # sample index of each interleaved prefill
    prefill_tokens: F64

    def predict(self, model: CostModel) -> F64:
        """Mean step time over each request's decode steps (pure decodes + prefill steps)."""
        pure = model.step_times(self.batch, self.ctx)
        extra = model.step_times(
            self.batch[self.prefill_owner] + self.prefill_tokens, self.ctx[self.prefill_owner]
        )
        total = pure * self.steps
        np.add.at(total, self.prefill_owner, extra - pure[self.prefill_owner])
        out: F64 = total / self.steps
        return out


def decode_samples(table: Any, max_samples: int = 2000) -> DecodeSamples:
    """Reconstruct each sampled request's decode batch from all requests' timestamps."""
    col = {
        n: np.asarray(table.column(n).to_numpy(zero_copy_only=False)) for n in table.column_names
    }
    with np.errstate(invalid="ignore"):
        # a TPOT of 0 or below cannot be a decode step time (its log error is undefined)
        ok = (
            (col["status"] == "ok")
            & (col["output_tokens"] >= 2)
            & np.isfinite(col["tpot_s"].astype(np.float64))
            & (col["tpot_s"].astype(np.float64) > 0)
        )
    if ok.sum() < 10:
        raise KvscopeError(
            f"calibration needs at least 10 completed requests with 2+ output tokens; "
            f"found {int(ok.sum())}."
        )
    start = col["first_scheduled_s"].astype(np.float64)
    first = col["first_token_s"].astype(np.float64)
    fin = col["finish_s"].astype(np.float64)
    prompt = col["prompt_tokens"].astype(np.float64)
    prefill = prompt - col["cached_prompt_tokens"].astype(np.float64)
    out = col["output_tokens"].astype(np.float64)
    idx = np.flatnonzero(ok)
    if len(idx) > max_samples:
        idx = idx[np.linspace(0, len(idx) - 1, max_samples).astype(np.int64)]
    alive_all = np.isfinite(start) & np.isfinite(fin)
    span = np.maximum(fin - first, 1e-12)
    batch = np.empty(len(idx))
    ctx = np.empty(len(idx))
    owners: list[NDArray[np.int64]] = []
    tokens: list[F64] = []
    for k, i in enumerate(idx):
        t = 0.5 * (first[i] + fin[i])
        alive = alive_all & (start <= t) & (fin > t)
        frac = np.clip((t - first[alive]) / span[alive], 0.0, 1.0)
        batch[k] = alive.sum()
        ctx[k] = float((prompt[alive] + out[alive] * frac).sum())
        inside = np.flatnonzero((first > first[i]) & (first <= fin[i]))
        owners.append(np.full(len(inside), k, dtype=np.int64))
        tokens.append(prefill[inside])
    return DecodeSamples(
        batch,
        ctx,
        col["tpot_s"][idx].astype(np.float64),
        np.maximum(out[idx] - 1.0, 1.0),
        np.concatenate(owners) if owners else np.zeros(0, np.int64),
        np.concatenate(tokens) if tokens else np.zeros(0),
    )


def fit_coefficients(terms: HardwareTerms, data: DecodeSamples) -> tuple[CostCoefficients, float]:
    """Grid-search (MFU, MBU); overhead = median residual. Returns coefficients and MAPE."""
    tpot = data.tpot

    def score(mfu: float, mbu: float) -> tuple[float, float]:
        base = data.predict(CostModel(terms, CostCoefficients(0.0, mfu, mbu)))
        overhead = max(float(np.median(tpot - base)), 0.0)
        pred = base + overhead
        return float(np.mean(np.log(pred / tpot) ** 2)), overhead

    best = (np.inf, 0.5, 0.5, 0.0)
    grid = np.geomspace(0.02, 1.0, 24)
    for mfu in grid:
        for mbu in grid:
            err, ov = score(float(mfu), float(mbu))
            if err < best[0]:
                best = (err, float(mfu), float(mbu), ov)
    for _ in range(2):  # refine around the best point
        _, m0, b0, _ = best
        for mfu in np.clip(m0 * np.geomspace(0.8, 1.25, 11), 1e-3, 1.0):
            for mbu in np.clip(b0 * np.geomspace(0.8, 1.25, 11), 1e-3, 1.0):
                err, ov = score(float(mfu), float(mbu))
                if err < best[0]:
                    best = (err, float(mfu), float(mbu), ov)
    _, mfu, mbu, ov = best
    coef = CostCoefficients(ov, mfu, mbu, source="fitted by kvscope simulate --calibrate")
    pred = data.predict(CostModel(terms, coef))
    mape = float(np.mean(np.abs(pred - tpot) / tpot))
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
        raise KvscopeError(f"{run_dir}: {what}; expected a bench run directory (with requests.parquet).")
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
    _pool, _layout, terms, _info = build_pool(cfg)
    data = decode_samples(table)
    coef, mape = fit_coefficients(terms, data)
    return Fit(coef, {"requests_used": len(data.tpot), "tpot_mape": mape, "run_dir": str(run_dir)})


@dataclass(frozen=True)
class Calibration:
    """A fit over several measured runs and its scores on runs it did not see."""

    coefficients: CostCoefficients
    report: dict[str, Any]
    #: (label, score) per held-out run: ``--holdout`` runs, else leave-one-out folds.
    scores: tuple[tuple[str, Any], ...]


def _fit_tables(tables: list[tuple[Path, Any]], terms: HardwareTerms) -> tuple[CostCoefficients, float, int]:
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
    coef, mape = fit_coefficients(terms, data)
    runs = ", ".join(str(p) for p, _t in tables)
    return replace(coef, source=f"fitted by kvscope calibrate on {runs}"), mape, len(data.tpot)


def calibrate_runs(
    run_dirs: list[Path],
    cfg: Any,
    *,
    holdout: list[Path] | None = None,
    min_requests: int = 10,
    scratch: Path | None = None,
) -> Calibration:
    """Fit the cost coefficients of deployment ``cfg`` (a SimConfig) on ``run_dirs`` and score
    the fit on ``holdout`` runs (replayed through the simulator), or, with no holdout and
    several runs, leave-one-out: each run is scored with a fit on the others. The returned
    coefficients are always the fit on every run of ``run_dirs``."""
    import tempfile

    from kvscope.sim.holdout import score_run
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
    fit_tables, held_tables = tables[: len(run_dirs)], tables[len(run_dirs) :]
    _pool, _layout, terms, _info = build_pool(cfg)
    coef, mape, used = _fit_tables(fit_tables, terms)
    scores: list[tuple[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        path = Path(tmp) / "cost.json"
        if held_tables:
            coef.save(path)
            scores = [(f"holdout {p.name}", score_run(p, t, cfg, str(path))) for p, t in held_tables]
        elif len(fit_tables) > 1:
            for k, (p, t) in enumerate(fit_tables):
                fold, _m, _u = _fit_tables(fit_tables[:k] + fit_tables[k + 1 :], terms)
                fold.save(path)
                scores.append((f"leave-out {p.name}", score_run(p, t, cfg, str(path))))
    report = {
        "runs": [str(p) for p, _t in fit_tables],
        "holdout": [str(p) for p, _t in held_tables],
        "requests_used": used,
        "tpot_mape": mape,
        "scores": [{"label": label, **s.as_dict()} for label, s in scores],
    }
    return Calibration(coef, report, tuple(scores))
