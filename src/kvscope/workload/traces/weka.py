"""WEKA-format agentic coding traces (callanjfox/kv-cache-tester ``traces/``).

One JSON object per file = one conversation: ``block_size`` (64), ``hash_id_scope``
(``local`` = ids numbered per conversation), ``requests[]`` with ``t`` (s from conversation
start), ``in``/``out`` tokens, ``hash_ids`` of *full* blocks (a trailing partial block is
dropped, so ``in`` may exceed ``len(hash_ids) * block_size``), ``think_time`` and
``api_time``. Entries of ``type: "subagent"`` nest their own ``requests[]`` whose ``t`` counts
from the sub-agent's spawn time and whose cache context is separate (format description in
callanjfox/agentic-coding-analysis ``docs/TRACE_FORMAT.md``).

Local ids are made global by hashing ``(conversation id, agent, id)``, so ids of different
conversations (or of a sub-agent and its parent) never collide. A directory loads every
``*.json`` in it, each conversation starting at t = 0 (as the replay tools do).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.workload.lengths import MAX_TOKENS
from kvscope.workload.stream import Workload
from kvscope.workload.traces.rows import BadRow, RowPolicy, as_float, as_int, as_tokens, read_text


def _scoped(scope: str, ids: list[int]) -> list[int]:
    out = []
    for i in ids:
        d = hashlib.blake2b(f"{scope}:{i}".encode(), digest_size=8).digest()
        out.append(int.from_bytes(d, "little") & ((1 << 63) - 1))
    return out


class _Conv:
    def __init__(self, path: Path, policy: RowPolicy) -> None:
        self.path = path
        self.policy = policy
        self.rows: list[tuple[float, int, int, list[int], str, int, str]] = []
        self.think_s: list[float] = []

    def walk(self, reqs: Any, t0: float, scope: str, session: str, where: str, local: bool) -> None:
        if not isinstance(reqs, list):
            raise KvscopeError(f"{self.path}: {where}.requests must be a list.")
        turn = 0
        for k, r in enumerate(reqs):
            loc = f"{where}.requests[{k}]" if where else f"requests[{k}]"
            try:
                if not isinstance(r, dict):
                    raise BadRow("a request must be a JSON object")
                t = t0 + as_float(r.get("t"), "t")
                if not math.isfinite(t):  # a sub-agent's offset plus its own can overflow
                    raise BadRow("field 't' puts the request past any representable time")
                if r.get("type") == "subagent":
                    agent = str(r.get("agent_id", k))
                    self.walk(
                        r.get("requests"), t, f"{scope}/{agent}", f"{session}/{agent}", loc, local
                    )
                    continue
                p = as_tokens(r.get("in"), "in", 1)
                o = as_tokens(r.get("out"), "out", 0)
                raw = r.get("hash_ids", [])
                if not isinstance(raw, list):
                    raise BadRow("field 'hash_ids' must be a list")
                ids = [as_int(h, "hash_ids", 0) for h in raw]
                if r.get("think_time") is not None:
                    self.think_s.append(as_float(r["think_time"], "think_time"))
            except BadRow as err:
                self.policy.bad(loc, str(err))
                continue
            hashes = _scoped(scope, ids) if local else ids
            self.rows.append((t, p, o, hashes, session, turn, f"{session}:{loc}"))
            turn += 1


def load_weka(path: Path, *, skip_bad: bool = False) -> Workload:
    """Read one WEKA trace file, or every ``*.json`` in a directory."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise KvscopeError(f"{path}: no *.json trace files in this directory.")
    all_rows: list[tuple[float, int, int, list[int], str, int, str]] = []
    block_size: int | None = None
    skipped = 0
    examples: list[str] = []
    thinks: list[float] = []
    for f in files:
        policy = RowPolicy(f, skip_bad)
        try:
            doc = json.loads(read_text(f))
        except json.JSONDecodeError as err:
            raise KvscopeError(f"{f}:{err.lineno}: not valid JSON ({err.msg}).") from None
        except RecursionError:
            raise KvscopeError(f"{f}: JSON nested too deeply to be a WEKA trace.") from None
        if not isinstance(doc, dict) or "requests" not in doc:
            raise KvscopeError(f"{f}: not a WEKA trace (no top-level 'requests').")
        bs = doc.get("block_size")
        if not isinstance(bs, int) or isinstance(bs, bool) or not 1 <= bs <= MAX_TOKENS:
            raise KvscopeError(f"{f}: field 'block_size' must be a positive integer.")
        if block_size is not None and bs != block_size:
            raise KvscopeError(f"{f}: block_size {bs} differs from {block_size} in other files.")
        block_size = bs
        conv = _Conv(f, policy)
        cid = str(doc.get("id", f.stem))
        conv.walk(doc["requests"], 0.0, cid, cid, "", doc.get("hash_id_scope", "local") == "local")
        all_rows.extend(conv.rows)
        thinks.extend(conv.think_s)
        skipped += policy.skipped
        examples.extend(policy.examples)
    off = np.zeros(len(all_rows) + 1, dtype=np.int64)
    np.cumsum([len(r[3]) for r in all_rows], out=off[1:])
    spec: dict[str, Any] = {
        "source": "trace",
        "format": "weka",
        "path": str(path),
        "conversations": len(files),
        "hash_block_size": block_size,
        "skipped_bad_rows": skipped,
        # arrivals already include the client's think time (t is absolute); kept for reference
        "mean_think_time_s": sum(thinks) / len(thinks) if thinks else None,
    }
    if examples:
        spec["skipped_examples"] = examples[:5]
    return Workload.build(
        [r[0] for r in all_rows],
        [r[1] for r in all_rows],
        [r[2] for r in all_rows],
        request_ids=[r[6] for r in all_rows],
        session_ids=[r[4] for r in all_rows],
        turns=[r[5] for r in all_rows],
        hash_offsets=off,
        hash_values=np.asarray([h for r in all_rows for h in r[3]], dtype=np.int64),
        hash_block_size=block_size,
        spec=spec,
    )
