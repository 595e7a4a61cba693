"""Allocation sites: the first frame of a stack that belongs to the user's code.

A stack's innermost frames are the allocator and PyTorch's own code (``??`` C++ frames,
``<frozen ...>`` and files under ``torch/``); the site is the first frame after them, as
``file:line:function``. The filter follows the spirit of ``_frame_filter`` in
``torch/cuda/_memory_viz.py``. Stacks with no user frame use their innermost frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvscope.memtrace.columns import Frames, SnapshotColumns

_INTERNAL_PREFIXES = ("<frozen", "<built-in")
_INTERNAL_PARTS = ("torch/", "torch\\", "c10/", "/site-packages/torch")


def is_internal(frame: tuple[str, int, str]) -> bool:
    """True for allocator, C++ and PyTorch-internal frames."""
    filename, _line, name = frame
    if filename in ("??", "") or filename.startswith(_INTERNAL_PREFIXES):
        return True
    if name.startswith(("c10::", "at::", "torch::", "std::")):
        return True
    return any(p in filename for p in _INTERNAL_PARTS)


def label(frame: tuple[str, int, str]) -> str:
    """``file:line:function`` for a frame."""
    return f"{frame[0]}:{frame[1]}:{frame[2]}"


@dataclass(frozen=True)
class SiteTable:
    """``site_of_stack[s]`` is the site id of stack ``s``; ``labels[i]`` names site ``i``.
    Site -1 means "no stack recorded"."""

    labels: list[str]
    site_of_stack: npt.NDArray[np.int32]


def site_table(frames: Frames) -> SiteTable:
    """Map each interned stack to its site."""
    labels: list[str] = []
    index: dict[str, int] = {}
    out = np.full(len(frames.stacks), -1, np.int32)
    for s, stack in enumerate(frames.stacks):
        chosen = next((f for f in stack if not is_internal(frames.frames[f])), stack[0])
        lab = label(frames.frames[chosen])
        if lab not in index:
            index[lab] = len(labels)
            labels.append(lab)
        out[s] = index[lab]
    return SiteTable(labels, out)


def sites_of(stacks: npt.NDArray[np.int32], table: SiteTable) -> npt.NDArray[np.int32]:
    """Site id for each stack id (-1 stays -1)."""
    if table.site_of_stack.size == 0:
        return np.full(stacks.shape, -1, np.int32)
    return np.where(stacks >= 0, table.site_of_stack[np.clip(stacks, 0, None)], -1).astype(np.int32)


@dataclass(frozen=True)
class SiteStat:
    """Allocations made at one site inside the analysed window."""

    site: str
    count: int
    bytes: int
    live_at_end_bytes: int


def top_sites(
    cols: SnapshotColumns,
    table: SiteTable,
    entries: npt.NDArray[np.int64],
    live_at_end: npt.NDArray[np.bool_],
    top: int = 10,
) -> tuple[list[SiteStat], list[SiteStat]]:
    """Top sites by bytes and by count among the ``alloc`` entries ``entries``."""
    tr = cols.trace
    site = sites_of(tr.stack[entries], table)
    key = site + 1  # bucket 0 collects allocations without a stack
    n = len(table.labels) + 1
    count = np.bincount(key, minlength=n)
    nbytes = np.bincount(key, weights=tr.size[entries].astype(np.float64), minlength=n)
    live = np.bincount(
        key, weights=np.where(live_at_end, tr.size[entries], 0).astype(np.float64), minlength=n
    )

    def stat(k: int) -> SiteStat:
        name = "<no stack recorded>" if k == 0 else table.labels[k - 1]
        return SiteStat(name, int(count[k]), int(nbytes[k]), int(live[k]))

    used = np.flatnonzero(count)
    by_bytes = used[np.argsort(-nbytes[used], kind="stable")][:top]
    by_count = used[np.argsort(-count[used], kind="stable")][:top]
    return [stat(int(k)) for k in by_bytes], [stat(int(k)) for k in by_count]
