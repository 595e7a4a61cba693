"""Interning stack frames while walking a raw snapshot, at a cost bounded by the file's size.

Each distinct frame ``(filename, line, name)`` is stored once and each distinct stack once, as a
tuple of frame ids. Interning keys on object identity first, because the producer
(``py_symbolize`` in ``torch/csrc/profiler/python/combined_traceback.cpp``) shares frame dicts,
so the pickle hands back the same dict object for a repeated frame.

A pickle can refer back to one object any number of times for two bytes each, so a small file
can make a naive walk do unbounded work: one 20,000-frame list shared by every trace entry
took a 777 KB file 30 s. The walk therefore costs each frames *list* once too (by identity,
for as long as the raw objects holding it are alive), and :meth:`Interner.charge` counts the
elements visited against a budget of one element per byte of the file (every element a real
snapshot holds takes at least one opcode byte of its own): a file that would need more is
refused with one line instead of a long stall.
"""

from __future__ import annotations

from typing import Any

from kvscope.errors import KvscopeError

#: Longest file or function name kept from a frame (longer ones are cut): names only label.
MAX_NAME = 512
#: Elements walked per byte of the file, and the allowance of a tiny file (see the docstring).
ITEMS_PER_BYTE = 1
MIN_ITEMS = 1 << 16


def budget(file_bytes: int | None) -> int | None:
    """The element budget of a walk over a file of ``file_bytes`` (None: unbounded)."""
    return None if file_bytes is None else max(MIN_ITEMS, ITEMS_PER_BYTE * file_bytes)


def label(value: Any, default: str = "?") -> str:
    """A string field as a bounded label; anything else (a list, a number) is ``default``."""
    return value[:MAX_NAME] if isinstance(value, str) else default


class Interner:
    """Frames and stacks seen so far, and the elements walked against the budget."""

    def __init__(self, max_items: int | None = None) -> None:
        self.frames: list[tuple[str, int, str]] = []
        self.stacks: list[tuple[int, ...]] = []
        self._frame_by_id: dict[int, int] = {}
        self._frame_by_value: dict[tuple[str, int, str], int] = {}
        self._stack_by_list: dict[int, int] = {}
        self._stack_by_ids: dict[tuple[int, ...], int] = {}
        self._stack_by_value: dict[tuple[int, ...], int] = {}
        # Keys use id(); holding each frame object keeps its id from being reused when the
        # raw trace is released chunk by chunk. Frames lists are not held (a real snapshot
        # has one per entry, and holding them would keep the whole raw trace alive): their
        # ids are only trusted while the objects that hold them are, see forget_lists.
        self._alive: list[Any] = []
        self.max_items = max_items
        self.items = 0

    def charge(self, n: int) -> None:
        """Count ``n`` more elements walked; refuse a file that needs more than its budget."""
        self.items += n
        if self.max_items is not None and self.items > self.max_items:
            raise KvscopeError(
                f"not a CUDA memory snapshot: it refers back to shared data far more often "
                f"than a real snapshot can (over {self.max_items:,} elements to walk for "
                "its size); refused before spending unbounded time on it."
            )

    def frame(self, f: Any) -> int:
        fid = self._frame_by_id.get(id(f))
        if fid is None:
            if not isinstance(f, dict):
                raise KvscopeError("a stack frame is not a dict: not a CUDA memory snapshot.")
            line = f.get("line", 0)
            if isinstance(line, bool) or not isinstance(line, int) or not 0 <= line < 2**63:
                line = 0
            key = (label(f.get("filename")), line, label(f.get("name")))
            fid = self._frame_by_value.get(key)
            if fid is None:
                fid = self._frame_by_value[key] = len(self.frames)
                self.frames.append(key)
            self._frame_by_id[id(f)] = fid
            self._alive.append(f)
        return fid

    def stack(self, frames: Any) -> int:
        if frames is None or (isinstance(frames, list | tuple) and not frames):
            return -1
        # The same list object (a pickle memo reference) is walked once, however often it
        # is referred to; a distinct list costs its length.
        sid = self._stack_by_list.get(id(frames))
        if sid is not None:
            return sid
        if not isinstance(frames, list | tuple):
            raise KvscopeError("a stack's 'frames' is not a list: not a CUDA memory snapshot.")
        self.charge(len(frames))
        ids = tuple(map(id, frames))
        sid = self._stack_by_ids.get(ids)
        if sid is None:
            value = tuple(map(self.frame, frames))
            sid = self._stack_by_value.get(value)
            if sid is None:
                sid = self._stack_by_value[value] = len(self.stacks)
                self.stacks.append(value)
            self._stack_by_ids[ids] = sid
        self._stack_by_list[id(frames)] = sid
        return sid

    def forget_lists(self) -> None:
        """Drop the frames-list identities: call whenever raw objects may have been freed
        (after each trace chunk), so a new list at a reused address is not mistaken for an
        old one. A list shared across chunks is then walked once per chunk, still bounded."""
        self._stack_by_list.clear()
