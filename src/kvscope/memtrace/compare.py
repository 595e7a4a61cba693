"""What changed between two snapshots (``kvscope memtrace analyze A --compare B``).

Three views of the difference, all from the end state of each snapshot:

- totals: reserved, allocated, free inside reserved, largest free block, external
  fragmentation and internal waste, A then B and B - A;
- segments present in only one snapshot, keyed by ``(device, address, total_size)`` as
  ``compare`` in ``torch/cuda/_memory_viz.py`` keys them by ``(address, total_size)``;
- live bytes per allocation site (blocks in the segments, by their stacks): the sites whose
  live memory grew or shrank most, which is where a leak between two dumps shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvscope.memtrace.columns import INACTIVE, SnapshotColumns
from kvscope.memtrace.fragmentation import FragSummary, segment_table, summarize
from kvscope.memtrace.sites import site_table, sites_of


@dataclass(frozen=True)
class SiteDelta:
    """Live bytes at one site in A and in B."""

    site: str
    a_bytes: int
    b_bytes: int
    delta_bytes: int


@dataclass(frozen=True)
class SnapshotDiff:
    """The difference B - A of two snapshots' end states."""

    a: FragSummary
    b: FragSummary
    reserved_delta_bytes: int
    allocated_delta_bytes: int
    free_delta_bytes: int
    external_frag_delta: float
    segments_only_in_a: int
    segments_only_in_b: int
    bytes_only_in_a: int
    bytes_only_in_b: int
    sites: list[SiteDelta]


def _live_by_site(cols: SnapshotColumns) -> dict[str, int]:
    sg = cols.segments
    table = site_table(cols.frames)
    live = sg.blk_state != INACTIVE
    site = sites_of(sg.blk_stack[live], table)
    out: dict[str, int] = {}
    for s, b in zip(site.tolist(), sg.blk_size[live].tolist(), strict=True):
        name = table.labels[s] if s >= 0 else "<no stack recorded>"
        out[name] = out.get(name, 0) + int(b)
    return out


def _seg_keys(cols: SnapshotColumns) -> dict[tuple[int, int, int], int]:
    sg = cols.segments
    return {
        (int(d), int(a), int(t)): int(t)
        for d, a, t in zip(sg.device, sg.address, sg.total_size, strict=True)
    }


def compare(a: SnapshotColumns, b: SnapshotColumns, top: int = 10) -> SnapshotDiff:
    """Compare the end states of snapshots ``a`` and ``b``."""
    fa = summarize(a, segment_table(a))[0]
    fb = summarize(b, segment_table(b))[0]
    ka, kb = _seg_keys(a), _seg_keys(b)
    only_a = set(ka) - set(kb)
    only_b = set(kb) - set(ka)
    sa, sb = _live_by_site(a), _live_by_site(b)
    deltas = [
        SiteDelta(s, sa.get(s, 0), sb.get(s, 0), sb.get(s, 0) - sa.get(s, 0))
        for s in set(sa) | set(sb)
    ]
    deltas = [d for d in deltas if d.delta_bytes != 0]
    deltas.sort(key=lambda d: (-abs(d.delta_bytes), d.site))
    return SnapshotDiff(
        a=fa,
        b=fb,
        reserved_delta_bytes=fb.reserved_bytes - fa.reserved_bytes,
        allocated_delta_bytes=fb.allocated_bytes - fa.allocated_bytes,
        free_delta_bytes=fb.free_bytes - fa.free_bytes,
        external_frag_delta=fb.external_frag - fa.external_frag,
        segments_only_in_a=len(only_a),
        segments_only_in_b=len(only_b),
        bytes_only_in_a=int(np.sum([ka[k] for k in only_a])) if only_a else 0,
        bytes_only_in_b=int(np.sum([kb[k] for k in only_b])) if only_b else 0,
        sites=deltas[:top],
    )
