"""What a measured run says about step times: per-request decode batches and prompt steps.

Reconstructed from the requests table's timestamps alone (``first_scheduled_s``,
``first_token_s``, ``finish_s``, token counts), so it works for any engine's bench run; used
by :mod:`kvscope.sim.calibrate`. Times in seconds, sizes in tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvscope.errors import KvscopeError
from kvscope.sim.cost import CostModel

F64 = NDArray[np.float64]
#: The requests-table columns the samples read.
SAMPLE_COLUMNS = (
    "status", "output_tokens", "prompt_tokens", "cached_prompt_tokens", "first_scheduled_s",
    "first_token_s", "finish_s", "tpot_s",
)  # fmt: skip


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
        owner = self.prefill_owner
        extra = model.step_times(
            self.batch[owner] + self.prefill_tokens, self.ctx[owner], self.batch[owner]
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


@dataclass(frozen=True)
class PrefillSamples:
    """Requests that found a free slot: their TTFT is the step that ran their prompt (plus,
    when others were decoding, about half a step of waiting for the one in flight)."""

    prompt: F64
    batch: F64  # requests decoding when it arrived
    ctx: F64  # KV tokens the prompt step attends (its own prompt included)
    ttft: F64

    def predict(self, model: CostModel) -> F64:
        own = model.step_times(self.prompt + self.batch, self.ctx, self.batch)
        ongoing = model.step_times(self.batch, np.maximum(self.ctx - self.prompt, 0.0))
        out: F64 = own + np.where(self.batch > 0, 0.5 * ongoing, 0.0)
        return out


def prefill_samples(table: Any, slots: int, max_samples: int = 2000) -> PrefillSamples | None:
    """Requests admitted at once (fewer than ``slots`` others in flight when they arrived),
    with what was decoding then; None when fewer than 10 such requests exist."""
    col = {n: np.asarray(table.column(n).to_numpy(zero_copy_only=False)) for n in SAMPLE_COLUMNS}
    start = col["first_scheduled_s"].astype(np.float64)
    # when each request reached the engine: a bench run's send time, else its arrival (a
    # simulated run's first_scheduled_s is when it was admitted, after any wait)
    key = "sent_s" if "sent_s" in table.column_names else "arrival_s"
    came = np.asarray(table.column(key).to_numpy(zero_copy_only=False)).astype(np.float64)
    first = col["first_token_s"].astype(np.float64)
    fin = col["finish_s"].astype(np.float64)
    prompt = col["prompt_tokens"].astype(np.float64) - col["cached_prompt_tokens"].astype(
        np.float64
    )
    total = col["prompt_tokens"].astype(np.float64)
    out = col["output_tokens"].astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = (col["status"] == "ok") & np.isfinite(first - came) & (first > came)
    idx = np.flatnonzero(ok)
    if len(idx) > max_samples:
        idx = idx[np.linspace(0, len(idx) - 1, max_samples).astype(np.int64)]
    rows: list[tuple[float, float, float, float]] = []
    span = np.maximum(fin - first, 1e-12)
    for i in idx:
        t = came[i]
        busy = (start < t) & (fin > t)
        busy[i] = False
        if busy.sum() >= slots:
            continue
        dec = busy & (first <= t)
        frac = np.clip((t - first[dec]) / span[dec], 0.0, 1.0)
        ctx = float((total[dec] + out[dec] * frac).sum()) + total[i]
        rows.append((prompt[i], float(dec.sum()), ctx, first[i] - t))
    if len(rows) < 10:
        return None
    a = np.asarray(rows, dtype=np.float64)
    return PrefillSamples(a[:, 0], a[:, 1], a[:, 2], a[:, 3])


PREFILL_FIELDS = tuple(f.name for f in fields(PrefillSamples))
