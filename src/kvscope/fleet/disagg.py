"""Prefill/decode disaggregation: a prefill pool, a KV transfer per request, a decode pool.

Units: seconds, bytes. As vLLM's disaggregated serving runs it (a proxy sends each request to
a prefill instance with ``max_tokens=1``, then to a decode instance whose KV connector, NIXL,
pulls the prompt's KV; the client's tokens come from the decode instance):

1. **Prefill pool** (``prefill.dp`` engines of ``prefill``'s layout, requests dealt by vLLM's
   DP load balancer, :mod:`kvscope.sim.data_parallel`): each request runs its prompt and one
   token. Its blocks stay held after it finishes until its KV is sent (vLLM's
   ``request_finished`` returns ``delay_free_blocks`` for the connector), released at the
   transfer's end (:class:`HeldPool`).
2. **Transfer**: the bytes one decode rank receives (:func:`kvscope.fleet.kv_transfer.kv_transfer`,
   the planner's per-request KV bytes), each rank over its own GPU's link in parallel; one
   prefill engine's transfers go one after another (FIFO on its links).
3. **Decode pool** (``decode.dp`` engines): a request arrives when its transfer ends (decode
   admission waits for the KV) and finds its prompt's full blocks already there
   (:class:`ReceivedKV`, a zero-cost tier), so the decode engine computes only the last
   partial block (< ``block_size`` tokens; vLLM receives that block too -- a small
   overstatement) and then decodes. TTFT is the decode side's first token, so it includes
   prefill queueing and compute, the transfer wait and the transfer.

A prefill engine short of blocks while others are still being sent waits for those sends: the
step that admits the request is stretched to their end (the whole batch waits; exact when the
engine has nothing else running).

Not modelled: a decode-side preemption recomputes locally in vLLM; here the received blocks
stay counted as received. Prefill and decode need the paged pool with ``--window-model bound``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.fleet.kv_transfer import KVLink, kv_transfer
from kvscope.sim.data_parallel import DataParallelGroup
from kvscope.sim.engine import sequences_from
from kvscope.sim.kv_pool import NO_HIT, PagedPool
from kvscope.sim.kv_tiers import TierStack
from kvscope.sim.run import SimConfig, engine_for, replica_pools
from kvscope.sim.sequence import Sequence as Seq
from kvscope.workload import Workload

ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class DisaggConfig:
    """Two pools (each a :class:`SimConfig`; ``dp`` = engines in the pool) and the link."""

    prefill: SimConfig
    decode: SimConfig
    link: KVLink
    #: The pools' names (a cluster file's ``name:``), prefill first.
    names: tuple[str, str] = ("prefill", "decode")

    @property
    def cost_file(self) -> str | None:
        return self.prefill.cost_file

    def check(self) -> None:
        """Size both pools' KV caches by the planner before anything runs (one line naming
        the pool that does not fit its GPUs)."""
        from kvscope.sim.run import build_pool

        for role, name, cfg in zip(ROLES, self.names, (self.prefill, self.decode), strict=True):
            what = f"{role} pool '{name}'"
            if cfg.window_model != "bound":
                raise KvscopeError(f"{what}: disaggregation needs --window-model bound.")
            try:
                build_pool(replace(cfg, dp=1))
            except KvscopeError as err:
                raise KvscopeError(f"{what}: {err.one_line()}") from None

    def with_flag(self, flag: str, value: str) -> DisaggConfig:
        """A copy with one simulate flag set in both pools (``--sweep``); the pools'
        engine counts stay those of the cluster file."""
        name = flag.lstrip("-")
        if name in ("replicas", "router", "router-weights", "autoscale", "data-parallel-size"):
            raise KvscopeError(
                f"--sweep {name}: prefill/decode pools take their engine counts from the "
                "cluster file and have no router or autoscaling."
            )
        return replace(
            self,
            prefill=self.prefill.with_flag(flag, value),
            decode=self.decode.with_flag(flag, value),
        )


class HeldPool(PagedPool):
    """A prefill engine's pool: a finished request's blocks are freed when its KV is sent."""

    def hold(self, clock: Callable[[], float], seconds_of: Callable[[Seq], float]) -> None:
        self._clock = clock
        self._seconds_of = seconds_of
        self._link_free = 0.0
        self._held: list[tuple[float, int, Seq]] = []
        self._wait_until = 0.0
        self.sent: dict[int, tuple[float, float]] = {}  # request index -> (start, end)

    def _release(self) -> None:
        now = self._clock()
        while self._held and self._held[0][0] <= now:
            _, _, seq = heapq.heappop(self._held)
            super().free(seq)

    def free(self, seq: Seq, keep_private: bool = True) -> None:
        if seq.status != "finished":
            super().free(seq, keep_private)
            return
        start = max(seq.finish_s, self._link_free)
        end = start + self._seconds_of(seq)
        self._link_free = end
        self.sent[seq.index] = (start, end)
        heapq.heappush(self._held, (end, seq.index, seq))

    def lookup(self, seq: Seq) -> Any:
        self._release()
        return super().lookup(seq)

    def blocks_needed(self, seq: Seq, slots: int, hit: Any = NO_HIT, cap: bool = False) -> int:
        """As the pool's, but blocks still being sent are waited for when the free ones are
        short: the earliest sends are completed and the step that admits ``seq`` is stretched
        to the last one's end (the engine loop cannot wait on its own)."""
        self._release()
        need = super().blocks_needed(seq, slots, hit, cap)
        while need > self.num_free and self._held:
            end, _, held = heapq.heappop(self._held)
            super().free(held)
            self._wait_until = max(self._wait_until, end)
            need = super().blocks_needed(seq, slots, hit, cap)
        return need

    def take_overhead_s(self, now: float) -> float:
        self._release()
        wait, self._wait_until = max(0.0, self._wait_until - now), 0.0
        return wait + super().take_overhead_s(now)


class ReceivedKV(TierStack):
    """The decode side's view of transferred KV: every listed block is present, free to load."""

    def __init__(self, keys: set[Hashable]) -> None:
        super().__init__([], "write-back")
        self.keys = keys

    def __bool__(self) -> bool:
        return True

    def find(self, key: Hashable) -> int:
        return 0 if key in self.keys else -1

    def load(self, keys: Sequence[Hashable], where: Sequence[int]) -> float:
        return 0.0


@dataclass
class DisaggResult:
    """Per-request rows (numpy columns, workload order) and summary figures."""

    columns: dict[str, np.ndarray]
    figures: dict[str, Any]
    #: The engines (each with its ``stats``, its ``pool``) and sequences of both sides, for a
    #: run directory (:mod:`kvscope.fleet.disagg_run`).
    sides: dict[str, Any] = field(default_factory=dict)


def _pools(cfg: SimConfig, what: str) -> tuple[list[PagedPool], Any, Any, dict[str, Any]]:
    if cfg.window_model != "bound":
        raise KvscopeError(f"disaggregation: the {what} pool needs --window-model bound.")
    return replica_pools(cfg, cfg.dp)


def simulate_disagg(workload: Workload, cfg: DisaggConfig) -> DisaggResult:
    """Serve ``workload`` through the prefill pool, the link and the decode pool."""
    from kvscope.specs.registry import load_model

    model = load_model(cfg.decode.model, dtype=cfg.decode.dtype, revision=cfg.decode.revision)
    one = replace(cfg.prefill, dp=1)
    pools, layout, terms, info = _pools(cfg.prefill, "prefill")
    prompts = workload.prompt_tokens
    transfers = {}

    def seconds_of(seq: Seq) -> float:
        t = kv_transfer(
            model, seq.prompt, cfg.link, kv_dtype=cfg.decode.kv_cache_dtype, tp=cfg.decode.tp
        )
        transfers[seq.index] = t
        return t.seconds

    engines = []
    held = [
        HeldPool(p.num_blocks, layout, p.enable_caching, p.tiers, window_model="bound")
        for p in pools
    ]
    for pool in held:
        engine = engine_for(workload, one, pool, layout, terms, info, None)[0]
        pool.hold(_clock_of(engine), seconds_of)
        engines.append(engine)
    pre_seqs = sequences_from(workload, layout.block_size)
    for s in pre_seqs:
        s.max_tokens = 1  # the proxy's prefill request: max_tokens=1
    pre_rank = DataParallelGroup(engines).run(pre_seqs)
    sent: dict[int, tuple[float, float]] = {}
    for pool in held:
        sent.update(pool.sent)
    n = len(workload)
    ok = np.array([i in sent for i in range(n)])
    t_start = np.array([sent[i][0] if i in sent else np.nan for i in range(n)])
    t_end = np.array([sent[i][1] if i in sent else np.nan for i in range(n)])
    prefill_done = np.array([s.finish_s for s in pre_seqs])
    sides: dict[str, Any] = {"prefill": (engines, pre_seqs, pre_rank, held)}
    dec = _decode(workload, cfg, t_end, ok, sides)
    arrival = workload.arrival_s
    per_rank = np.array([transfers[i].bytes_per_rank if i in transfers else 0.0 for i in range(n)])
    cols = {
        "arrival_s": arrival,
        "prompt_tokens": prompts,
        "output_tokens": workload.output_tokens,
        "prefill_rank": np.asarray(pre_rank, dtype=np.int64),
        "prefill_done_s": prefill_done,
        "transfer_start_s": t_start,
        "transfer_end_s": t_end,
        "transfer_bytes_per_rank": per_rank,
        **dec,
    }
    cols["ttft_s"] = cols["first_token_s"] - arrival
    cols["e2e_s"] = cols["finish_s"] - arrival
    out = np.maximum(cols["decoded_tokens"] - 1, 1)
    cols["tpot_s"] = np.where(
        cols["decoded_tokens"] >= 2, (cols["finish_s"] - cols["first_token_s"]) / out, np.nan
    )
    return DisaggResult(cols, _figures(cols, cfg, len(held)), sides)


def _decode(
    workload: Workload,
    cfg: DisaggConfig,
    ready: np.ndarray,
    ok: np.ndarray,
    sides: dict[str, Any],
) -> dict[str, np.ndarray]:
    """The decode pool: requests arrive when their KV has arrived."""
    idx = np.flatnonzero(ok)
    ids = workload.request_ids[idx]
    offs, vals = workload.hash_offsets, workload.hash_values
    sub = Workload.build(
        ready[idx],
        workload.prompt_tokens[idx],
        workload.output_tokens[idx],
        request_ids=ids,
        hash_offsets=None if offs is None or vals is None else _sub_offsets(offs, idx),
        hash_values=None if offs is None or vals is None else _sub_values(offs, vals, idx),
        hash_block_size=workload.hash_block_size,
    )
    one = replace(cfg.decode, dp=1)
    pools, layout, terms, info = _pools(cfg.decode, "decode")
    seqs = sequences_from(sub, layout.block_size)
    keys: set[Hashable] = set()
    bs = layout.block_size
    for s in seqs:
        keys.update(pools[0]._key(s, j) for j in range((s.prompt - 1) // bs))
    engines = []
    for pool in pools:
        pool.tiers = ReceivedKV(keys)
        engines.append(engine_for(sub, one, pool, layout, terms, info, None)[0])
    ranks = DataParallelGroup(engines).run(seqs)
    sides["decode"] = (engines, seqs, ranks, pools)
    where = {rid: k for k, rid in enumerate(workload.request_ids.tolist())}
    n = len(workload)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    decoded = np.zeros(n, dtype=np.int64)
    rank = np.full(n, -1, dtype=np.int64)
    for s, r in zip(seqs, ranks, strict=True):
        i = where[s.request_id]
        first[i], finish[i], decoded[i], rank[i] = s.first_token_s, s.finish_s, s.outputs, r
    return {
        "decode_rank": rank,
        "first_token_s": first,
        "finish_s": finish,
        "decoded_tokens": decoded,
    }


def _clock_of(engine: Any) -> Callable[[], float]:
    """The engine's own clock (each replica keeps one)."""
    return lambda: float(engine.t)


def _sub_offsets(offs: np.ndarray, idx: np.ndarray) -> np.ndarray:
    lens = offs[idx + 1] - offs[idx]
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def _sub_values(offs: np.ndarray, vals: np.ndarray, idx: np.ndarray) -> np.ndarray:
    parts = [vals[offs[i] : offs[i + 1]] for i in idx]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def _pcts(x: np.ndarray) -> dict[str, float]:
    x = x[np.isfinite(x)]
    if not len(x):
        return {"mean": float("nan"), "p50": float("nan"), "p90": float("nan"), "p99": float("nan")}
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def _figures(
    cols: dict[str, np.ndarray], cfg: DisaggConfig, prefill_engines: int
) -> dict[str, Any]:
    """TTFT/TPOT/E2E and where the time to first token went."""
    arrival = cols["arrival_s"]
    return {
        "requests": len(arrival),
        "completed": int(np.isfinite(cols["finish_s"]).sum()),
        "prefill_engines": prefill_engines,
        "decode_engines": cfg.decode.dp,
        "link": {
            "kind": cfg.link.kind,
            "bandwidth": cfg.link.bandwidth,
            "latency_s": cfg.link.latency_s,
        },
        "ttft_s": _pcts(cols["ttft_s"]),
        "tpot_s": _pcts(cols["tpot_s"]),
        "e2e_s": _pcts(cols["e2e_s"]),
        "ttft_parts_s": {
            "prefill": _pcts(cols["prefill_done_s"] - arrival),
            "transfer_wait": _pcts(cols["transfer_start_s"] - cols["prefill_done_s"]),
            "transfer": _pcts(cols["transfer_end_s"] - cols["transfer_start_s"]),
            "decode_first_token": _pcts(cols["first_token_s"] - cols["transfer_end_s"]),
        },
        "transfer_bytes_per_rank": _pcts(cols["transfer_bytes_per_rank"]),
        "transfer_bytes_total": float(cols["transfer_bytes_per_rank"].sum() * cfg.decode.tp),
    }
