"""The workload stream: an ordered, reproducible, columnar sequence of requests.

``Workload`` keeps one numpy array per field (arrival seconds, prompt and output tokens, ids,
optional session/turn, prefix hashes as a ragged ``offsets``/``values`` pair), so a million
requests load, transform and save in well under a second of array work; iterating yields
:class:`~kvscope.workload.request.Request` rows for consumers that go one request at a time.

Arrival times are seconds, sorted non-decreasing; token counts are integers. ``spec`` records
how the stream was made (generator parameters and seed, or source file, plus every transform
applied), ready to be copied into a run directory's ``summary.json``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from kvscope.errors import KvscopeError
from kvscope.workload.request import Request

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
Obj = NDArray[np.object_]


def make_ids(prefix: str, n: int, start: int = 0) -> Obj:
    """``n`` request ids ``prefix0``, ``prefix1`` ... as an object array (built with pyarrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    nums = pc.cast(pa.array(np.arange(start, start + n, dtype=np.int64)), pa.string())
    joined = pc.binary_join_element_wise(prefix, nums, "")
    out: Obj = joined.to_numpy(zero_copy_only=False).astype(object)
    return out


def take_ragged(offsets: I64, values: I64, idx: I64) -> tuple[I64, I64]:
    """Rows ``idx`` of a ragged array given as ``offsets`` (len n+1) and flat ``values``."""
    starts = offsets[idx]
    lengths = offsets[idx + 1] - starts
    new_off = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_off[1:])
    total = int(new_off[-1])
    gather = np.repeat(starts - new_off[:-1], lengths) + np.arange(total, dtype=np.int64)
    return new_off, values[gather].astype(np.int64, copy=False)


@dataclass(frozen=True, eq=False)
class Workload:
    """Columnar request stream; build with :meth:`build` (which sorts) or a loader."""

    arrival_s: F64
    prompt_tokens: I64
    output_tokens: I64
    request_ids: Obj
    session_ids: Obj | None = None
    turns: I64 | None = None  # -1 where a request has no turn index
    hash_offsets: I64 | None = None  # len n+1; row i's hashes are values[off[i]:off[i+1]]
    hash_values: I64 | None = None
    hash_block_size: int | None = None
    prompt_texts: Obj | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name in ("prompt_tokens", "output_tokens", "request_ids"):
            if len(getattr(self, name)) != n:
                raise KvscopeError(f"workload column {name} has a different length than arrival_s.")
        for name in ("session_ids", "turns", "prompt_texts"):
            col = getattr(self, name)
            if col is not None and len(col) != n:
                raise KvscopeError(f"workload column {name} has a different length than arrival_s.")
        if (self.hash_offsets is None) != (self.hash_values is None):
            raise KvscopeError("workload prefix hashes need both offsets and values.")
        if self.hash_offsets is not None and (
            len(self.hash_offsets) != n + 1 or not self.hash_block_size
        ):
            raise KvscopeError(
                "workload prefix hashes: offsets must be n+1 long with a block size."
            )
        if n > 1 and bool(np.any(np.diff(self.arrival_s) < 0)):
            raise KvscopeError("workload arrival times must be sorted (use Workload.build).")

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        arrival_s: Any,
        prompt_tokens: Any,
        output_tokens: Any,
        *,
        request_ids: Any = None,
        id_prefix: str = "r",
        session_ids: Any = None,
        turns: Any = None,
        hash_offsets: Any = None,
        hash_values: Any = None,
        hash_block_size: int | None = None,
        prompt_texts: Any = None,
        spec: Mapping[str, Any] | None = None,
    ) -> Workload:
        """Make a workload from array-likes, stably sorting rows by arrival time."""
        arr = np.asarray(arrival_s, dtype=np.float64)
        ids = (
            make_ids(id_prefix, len(arr))
            if request_ids is None
            else np.asarray(request_ids, dtype=object)
        )
        prompt = _ints(prompt_tokens, "prompt_tokens")
        output = _ints(output_tokens, "output_tokens")
        sess = None if session_ids is None else np.asarray(session_ids, dtype=object)
        trn = None if turns is None else np.asarray(turns, dtype=np.int64)
        off = None if hash_offsets is None else np.asarray(hash_offsets, dtype=np.int64)
        vals = None if hash_values is None else np.asarray(hash_values, dtype=np.int64)
        texts = None if prompt_texts is None else np.asarray(prompt_texts, dtype=object)
        if not _sorted(arr) and all(len(c) == len(arr) for c in (prompt, output, ids)):
            order = np.argsort(arr, kind="stable")
            arr, prompt, output, ids = arr[order], prompt[order], output[order], ids[order]
            sess = None if sess is None else sess[order]
            trn = None if trn is None else trn[order]
            texts = None if texts is None else texts[order]
            if off is not None and vals is not None and len(off) == len(order) + 1:
                off, vals = take_ragged(off, vals, order)
        return cls(
            arrival_s=arr,
            prompt_tokens=prompt,
            output_tokens=output,
            request_ids=ids,
            session_ids=sess,
            turns=trn,
            hash_offsets=off,
            hash_values=vals,
            hash_block_size=hash_block_size,
            prompt_texts=texts,
            spec=dict(spec or {}),
        )

    @classmethod
    def empty(cls, spec: Mapping[str, Any] | None = None) -> Workload:
        """A workload with no requests."""
        return cls.build([], [], [], spec=spec)

    @classmethod
    def from_requests(
        cls, requests: list[Request], spec: Mapping[str, Any] | None = None
    ) -> Workload:
        """Collect ``Request`` rows into a workload (hash block size must agree)."""
        sizes = {r.hash_block_size for r in requests if r.prefix_hashes}
        if len(sizes) > 1:
            shown = ", ".join(str(v) for v in sorted(sizes))  # type: ignore[type-var]
            raise KvscopeError(f"requests mix prefix-hash block sizes {shown}.")
        has_hash = bool(sizes)
        lengths = np.array([len(r.prefix_hashes) for r in requests], dtype=np.int64)
        off = np.zeros(len(requests) + 1, dtype=np.int64)
        np.cumsum(lengths, out=off[1:])
        has_sess = any(r.session_id is not None for r in requests)
        has_text = any(r.prompt_text is not None for r in requests)
        return cls.build(
            [r.arrival_s for r in requests],
            [r.prompt_tokens for r in requests],
            [r.output_tokens for r in requests],
            request_ids=[r.request_id for r in requests],
            session_ids=[r.session_id for r in requests] if has_sess else None,
            turns=[-1 if r.turn is None else r.turn for r in requests] if has_sess else None,
            hash_offsets=off if has_hash else None,
            hash_values=np.array([h for r in requests for h in r.prefix_hashes], dtype=np.int64)
            if has_hash
            else None,
            hash_block_size=sizes.pop() if has_hash else None,
            prompt_texts=[r.prompt_text for r in requests] if has_text else None,
            spec=spec,
        )

    @classmethod
    def from_file(
        cls, path: str | Path, fmt: str | None = None, *, skip_bad: bool = False
    ) -> Workload:
        """Load a trace or a kvscope workload file; the format is detected unless given."""
        from kvscope.workload.traces.detect import load_trace

        return load_trace(Path(path), fmt=fmt, skip_bad=skip_bad)

    # ------------------------------------------------------------------ row access
    def __len__(self) -> int:
        return len(self.arrival_s)

    @overload
    def __getitem__(self, key: int) -> Request: ...
    @overload
    def __getitem__(self, key: slice) -> Workload: ...
    def __getitem__(self, key: int | slice) -> Request | Workload:
        if isinstance(key, slice):
            return self.take(np.arange(len(self), dtype=np.int64)[key], note=None)
        n = len(self)
        i = key + n if key < 0 else key
        if not 0 <= i < n:
            raise IndexError(key)
        hashes: tuple[int, ...] = ()
        if self.hash_offsets is not None and self.hash_values is not None:
            a, b = int(self.hash_offsets[i]), int(self.hash_offsets[i + 1])
            hashes = tuple(int(h) for h in self.hash_values[a:b])
        turn = None if self.turns is None or self.turns[i] < 0 else int(self.turns[i])
        return Request(
            request_id=str(self.request_ids[i]),
            arrival_s=float(self.arrival_s[i]),
            prompt_tokens=int(self.prompt_tokens[i]),
            output_tokens=int(self.output_tokens[i]),
            prefix_hashes=hashes,
            hash_block_size=self.hash_block_size if hashes else None,
            session_id=None if self.session_ids is None else self.session_ids[i],
            turn=turn,
            prompt_text=None if self.prompt_texts is None else self.prompt_texts[i],
        )

    def __iter__(self) -> Iterator[Request]:
        # Columns go to Python lists once; per-row indexing of numpy arrays is ~10x slower.
        ids, arr = self.request_ids.tolist(), self.arrival_s.tolist()
        pt, ot = self.prompt_tokens.tolist(), self.output_tokens.tolist()
        sess = None if self.session_ids is None else self.session_ids.tolist()
        turns = None if self.turns is None else self.turns.tolist()
        texts = None if self.prompt_texts is None else self.prompt_texts.tolist()
        off = None if self.hash_offsets is None else self.hash_offsets.tolist()
        vals = None if self.hash_values is None else self.hash_values.tolist()
        for i in range(len(ids)):
            hashes = () if off is None or vals is None else tuple(vals[off[i] : off[i + 1]])
            turn = None if turns is None or turns[i] < 0 else turns[i]
            yield Request(
                request_id=str(ids[i]),
                arrival_s=arr[i],
                prompt_tokens=pt[i],
                output_tokens=ot[i],
                prefix_hashes=hashes,
                hash_block_size=self.hash_block_size if hashes else None,
                session_id=None if sess is None else sess[i],
                turn=turn,
                prompt_text=None if texts is None else texts[i],
            )

    def hashes_of(self, i: int) -> I64:
        """Prefix hashes of row ``i`` as an array (empty when the stream has none)."""
        if self.hash_offsets is None or self.hash_values is None:
            return np.zeros(0, dtype=np.int64)
        return self.hash_values[self.hash_offsets[i] : self.hash_offsets[i + 1]]

    # ------------------------------------------------------------------ properties
    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last arrival (0 for fewer than two requests)."""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0

    @property
    def mean_rate_per_s(self) -> float:
        """Requests per second over the arrival span (``nan`` when the span is zero)."""
        d = self.duration_s
        return len(self) / d if d > 0 else float("nan")

    # ------------------------------------------------------------------ transforms
    def replace(self, **changes: Any) -> Workload:
        """A copy with some columns replaced (arrays are shared, not copied)."""
        fields = {f: getattr(self, f) for f in self.__dataclass_fields__}
        fields.update(changes)
        return Workload(**fields)

    def _noted(self, op: Mapping[str, Any]) -> dict[str, Any]:
        spec = copy.deepcopy(dict(self.spec))
        spec.setdefault("transforms", []).append(dict(op))
        return spec

    def take(self, idx: Any, note: Mapping[str, Any] | None = None) -> Workload:
        """Rows ``idx`` (an index array, kept in the given order, which must stay sorted)."""
        ix = np.asarray(idx, dtype=np.int64)
        off, vals = self.hash_offsets, self.hash_values
        if off is not None and vals is not None:
            off, vals = take_ragged(off, vals, ix)
        return Workload(
            arrival_s=self.arrival_s[ix],
            prompt_tokens=self.prompt_tokens[ix],
            output_tokens=self.output_tokens[ix],
            request_ids=self.request_ids[ix],
            session_ids=None if self.session_ids is None else self.session_ids[ix],
            turns=None if self.turns is None else self.turns[ix],
            hash_offsets=off,
            hash_values=vals,
            hash_block_size=self.hash_block_size,
            prompt_texts=None if self.prompt_texts is None else self.prompt_texts[ix],
            spec=self._noted(note) if note else dict(self.spec),
        )

    def window(self, start_s: float = 0.0, end_s: float | None = None) -> Workload:
        """Requests arriving in ``[start_s, end_s)`` (seconds on the stream's own clock)."""
        lo = int(np.searchsorted(self.arrival_s, start_s, side="left"))
        hi = len(self) if end_s is None else int(np.searchsorted(self.arrival_s, end_s, "left"))
        return self.take(np.arange(lo, hi), {"op": "window", "start_s": start_s, "end_s": end_s})

    def shift_to_zero(self) -> Workload:
        """Move the clock so the first request arrives at t = 0 s."""
        if len(self) == 0 or self.arrival_s[0] == 0:
            return self
        t0 = float(self.arrival_s[0])
        return self.replace(
            arrival_s=self.arrival_s - t0, spec=self._noted({"op": "shift", "by_s": -t0})
        )

    def speedup(self, factor: float) -> Workload:
        """Compress time by ``factor`` (2 = twice the rate); arrivals are divided by it."""
        if not factor > 0 or not np.isfinite(factor):
            raise KvscopeError(f"speed-up factor must be a positive number, got {factor}.")
        return self.replace(
            arrival_s=self.arrival_s / factor, spec=self._noted({"op": "speedup", "factor": factor})
        )

    def rescale_rate(self, rate_per_s: float) -> Workload:
        """Speed up or slow down so the mean rate (count / span) equals ``rate_per_s``."""
        current = self.mean_rate_per_s
        if not np.isfinite(current):
            raise KvscopeError("cannot rescale the rate of a workload whose arrivals span 0 s.")
        if not rate_per_s > 0:
            raise KvscopeError(f"target rate must be positive, got {rate_per_s}.")
        out = self.speedup(rate_per_s / current)
        return out.replace(spec=out._noted({"op": "rescale_rate", "rate_per_s": rate_per_s}))

    def limit(self, n: int) -> Workload:
        """The first ``n`` requests."""
        if n < 0:
            raise KvscopeError(f"limit must be >= 0, got {n}.")
        return self.take(np.arange(min(n, len(self))), {"op": "limit", "n": n})

    def sample(
        self, n: int | None = None, *, fraction: float | None = None, seed: int = 0
    ) -> Workload:
        """A random subset (without replacement) of ``n`` rows or a ``fraction``, order kept."""
        if (n is None) == (fraction is None):
            raise KvscopeError("sample needs exactly one of n or fraction.")
        k = round(len(self) * fraction) if fraction is not None else int(n or 0)
        if not 0 <= k <= len(self):
            raise KvscopeError(f"cannot sample {k} of {len(self)} requests.")
        rng = np.random.default_rng(seed)
        idx = np.sort(rng.choice(len(self), size=k, replace=False))
        return self.take(idx, {"op": "sample", "n": k, "seed": seed})

    def with_arrivals(self, arrival_s: Any, note: Mapping[str, Any] | None = None) -> Workload:
        """Re-time the stream: the i-th request (in current order) gets the i-th new arrival."""
        arr = np.sort(np.asarray(arrival_s, dtype=np.float64))
        if len(arr) != len(self):
            raise KvscopeError(f"{len(arr)} arrival times given for {len(self)} requests.")
        return self.replace(arrival_s=arr, spec=self._noted(note or {"op": "retime"}))

    def clamp(self, max_model_len: int) -> Workload:
        """Clamp so prompt + output <= ``max_model_len`` (prompt keeps >= 1 output slot)."""
        if max_model_len < 2:
            raise KvscopeError(f"max-model-len must be >= 2, got {max_model_len}.")
        prompt = np.minimum(self.prompt_tokens, max_model_len - 1)
        output = np.minimum(self.output_tokens, max_model_len - prompt)
        changed = int(
            np.count_nonzero((prompt != self.prompt_tokens) | (output != self.output_tokens))
        )
        note = {"op": "clamp", "max_model_len": max_model_len, "clamped_requests": changed}
        return self.replace(prompt_tokens=prompt, output_tokens=output, spec=self._noted(note))

    # ------------------------------------------------------------------ output
    def to_parquet(self, path: str | Path) -> Path:
        """Write as kvscope Parquet (spec kept in the schema metadata)."""
        from kvscope.workload.traces.native import write_parquet

        return write_parquet(self, Path(path))

    def to_jsonl(self, path: str | Path) -> Path:
        """Write as kvscope JSONL: one request object per line."""
        from kvscope.workload.traces.native import write_jsonl

        return write_jsonl(self, Path(path))

    def save(self, path: str | Path) -> Path:
        """Write Parquet for ``.parquet``, JSONL for ``.jsonl``/``.json``; else an error."""
        p = Path(path)
        if p.suffix == ".parquet":
            return self.to_parquet(p)
        if p.suffix in (".jsonl", ".json"):
            return self.to_jsonl(p)
        raise KvscopeError(f"{p}: output must end in .parquet or .jsonl.")


def _ints(values: Any, name: str) -> I64:
    """A token column as int64; a count past int64 is one error line, not an OverflowError."""
    try:
        out: I64 = np.asarray(values, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        raise KvscopeError(
            f"workload column {name} holds values that are not int64 counts."
        ) from None
    return out


def _sorted(arr: F64) -> bool:
    return len(arr) < 2 or not bool(np.any(np.diff(arr) < 0))
