"""Drift-free periodic scheduling for samplers.

Tick ``k`` is due at ``start + k * interval`` on a monotonic clock, whatever the work of
earlier ticks cost, so errors never accumulate (sleeping ``interval`` after each tick would
drift by the work time every tick). A tick that would start more than one interval late is
skipped and counted in ``missed`` instead of firing in a burst to "catch up".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kvscope.errors import KvscopeError


@dataclass
class Ticker:
    """Yields ``(k, due_s)`` on the monotonic clock until ``stop`` is set or ``duration_s`` ends.

    ``clock`` and ``wait`` are injectable for tests: ``wait(timeout)`` returns True when the
    ticker should stop (by default it waits on ``stop``, so a signal handler ends a sleep at once).
    """

    interval_s: float
    duration_s: float | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], float] = time.monotonic
    wait: Callable[[float], bool] | None = None
    missed: int = 0

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise KvscopeError(f"interval must be positive, got {self.interval_s}.")

    def __iter__(self) -> Iterator[tuple[int, float]]:
        wait = self.wait or self.stop.wait
        start = self.clock()
        k = 0
        while not self.stop.is_set():
            due = start + k * self.interval_s
            if self.duration_s is not None and due - start >= self.duration_s - 1e-9:
                return
            now = self.clock()
            if now - due >= self.interval_s:
                skip = int((now - due) // self.interval_s)
                self.missed += skip
                k += skip
                continue
            if due > now and wait(due - now):
                return
            yield k, due
            k += 1
