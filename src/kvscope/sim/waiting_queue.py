"""The waiting queue of vLLM's scheduler: first come first served, or by priority.

``fcfs``: a deque; a preempted request goes back to the front (vLLM 0.33.0
``Scheduler._preempt_request``: ``self.waiting.prepend_request``). ``priority``: a heap on
(priority, arrival time, index), vLLM's ``PriorityRequestQueue`` order (lower value first,
then earlier arrival); a preempted request re-enters by that key.
"""

from __future__ import annotations

import heapq
from collections import deque

from kvscope.sim.sequence import Sequence


class WaitingQueue:
    """Requests waiting for admission, in the order the scheduler's policy takes them."""

    def __init__(self, priority: bool) -> None:
        self.priority = priority
        self._fcfs: deque[Sequence] = deque()
        self._heap: list[tuple[int, float, int, Sequence]] = []

    def __len__(self) -> int:
        return len(self._heap) if self.priority else len(self._fcfs)

    def peek(self) -> Sequence:
        return self._heap[0][3] if self.priority else self._fcfs[0]

    def pop(self) -> Sequence:
        if self.priority:
            return heapq.heappop(self._heap)[3]
        return self._fcfs.popleft()

    def push(self, seq: Sequence, front: bool = False) -> None:
        if self.priority:
            heapq.heappush(self._heap, (seq.priority, seq.arrival_s, seq.index, seq))
        elif front:
            self._fcfs.appendleft(seq)
        else:
            self._fcfs.append(seq)

    def in_order(self) -> list[Sequence]:
        if self.priority:
            return [e[3] for e in sorted(self._heap, key=lambda e: e[:3])]
        return list(self._fcfs)
