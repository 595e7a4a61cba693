"""The decode cohort: running requests that only decode, advanced by one shared clock.

Most running requests, most of the time, decode one token per step into a block that still
has room. vLLM's scheduler visits each of them every step; the simulator instead keeps them
in a cohort whose members' counts are ``base + clock``, so a step costs O(1) for all of them
and only *events* are touched one by one: a member needing a new block (its computed tokens
reach the room its blocks give) or finishing (its outputs reach ``max_tokens``). Events are
kept in a heap keyed by clock value; a member leaving the cohort bumps its ``epoch`` so stale
heap entries are skipped. With a full-attention-only layout block growth is periodic (every
``block_size`` steps, at a clock residue fixed by the member's count), so members sit in one
of ``block_size`` buckets instead of the heap and a step takes the due bucket whole.
Dissolving the cohort (materialising every member) hands the next
step to the exact per-request loop, which is what the scheduler does under block or budget
pressure, where order and preemption matter.
"""

from __future__ import annotations

import heapq

from kvscope.sim.sequence import Sequence

GROW = 0
FINISH = 1


class DecodeCohort:
    """Members, the shared clock and the heap of members' next events."""

    def __init__(self, block_size: int, caching: bool, periodic: bool) -> None:
        self.clock = 0
        self.size = 0
        self.sum_base_c = 0
        self._bs = block_size
        self._caching = caching
        self._heap: list[tuple[int, int, int, int, Sequence]] = []
        self.periodic = periodic
        self._buckets: list[dict[int, Sequence]] = [{} for _ in range(block_size)]

    @property
    def computed_total(self) -> int:
        """Sum of members' computed tokens."""
        return self.sum_base_c + self.size * self.clock

    def join(self, seq: Sequence) -> None:
        """Add a decoding request (computed = num_tokens - 1, blocks allocated)."""
        g = self.clock
        seq.in_cohort = True
        seq.base_c = seq.computed - g
        seq.base_o = seq.outputs - g
        self.size += 1
        self.sum_base_c += seq.base_c
        self._push(seq)

    def _push(self, seq: Sequence) -> None:
        heap = self._heap
        # it needs a block at the step whose start has computed == room
        if self.periodic:
            self._buckets[(seq.room - seq.base_c) % self._bs][seq.admit_no] = seq
        else:
            heapq.heappush(
                heap, (max(seq.room - seq.base_c, self.clock), GROW, seq.admit_no, seq.epoch, seq)
            )
        heapq.heappush(
            heap, (seq.max_tokens - seq.base_o - 1, FINISH, seq.admit_no, seq.epoch, seq)
        )

    def sync(self, seq: Sequence) -> None:
        """Write a member's true counts into its fields (it stays a member)."""
        g = self.clock
        seq.computed = seq.base_c + g
        seq.outputs = seq.base_o + g
        if seq.computed > seq.slots:
            seq.slots = seq.computed
        if self._caching:
            h = min(seq.computed, seq.prompt + seq.outputs) // self._bs
            if h > seq.hashed:
                seq.hashed = h

    def leave(self, seq: Sequence) -> None:
        if self.periodic:
            self._buckets[(seq.room - seq.base_c) % self._bs].pop(seq.admit_no, None)
        self.sync(seq)
        seq.in_cohort = False
        seq.epoch += 1
        self.size -= 1
        self.sum_base_c -= seq.base_c

    def regrow(self, seq: Sequence) -> None:
        """Re-arm a member's block event after it got a new block."""
        heapq.heappush(
            self._heap,
            (max(seq.room - seq.base_c, self.clock + 1), GROW, seq.admit_no, seq.epoch, seq),
        )

    def due(self, kind: int) -> list[Sequence]:
        """Members whose ``kind`` event falls on the current clock, in running order."""
        heap = self._heap
        out: list[Sequence] = []
        keep: list[tuple[int, int, int, int, Sequence]] = []
        g = self.clock
        while heap and heap[0][0] <= g:
            entry = heapq.heappop(heap)
            seq = entry[4]
            if entry[3] != seq.epoch or not seq.in_cohort:
                continue
            if entry[1] == kind:
                out.append(seq)
            else:
                keep.append(entry)
        for entry in keep:
            heapq.heappush(heap, entry)
        out.sort(key=lambda s: s.admit_no)
        return out

    def due_bucket(self) -> dict[int, Sequence]:
        """Periodic layouts: members that need one more block at this step."""
        return self._buckets[self.clock % self._bs]

    def next_events(self) -> tuple[int, int]:
        """Clock values of the earliest live block event and finish event (large if none)."""
        heap = self._heap
        while heap and (heap[0][3] != heap[0][4].epoch or not heap[0][4].in_cohort):
            heapq.heappop(heap)
        none = 1 << 62
        if not heap:
            return none, none
        if self.periodic:  # the heap holds finishes only; block events live in buckets
            g = self.clock
            grow = none
            for d in range(self._bs):
                if self._buckets[(g + d) % self._bs]:
                    grow = g + d
                    break
            return grow, heap[0][0]
        grow = fin = none
        for entry in heap:  # a heap is not sorted by kind: scan the live entries
            if entry[3] != entry[4].epoch or not entry[4].in_cohort:
                continue
            if entry[1] == GROW:
                grow = min(grow, entry[0])
            else:
                fin = min(fin, entry[0])
        return grow, fin
