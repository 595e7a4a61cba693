"""Live alerting inside ``kvscope watch``: evaluate each tick's samples, run the actions.

:class:`WatchAlerts` is an ``on_tick`` hook for :class:`kvscope.telemetry.watch.Watch`. It feeds
the samples of the latest tick (``Watch.last_samples``) to a
:class:`~kvscope.alerts.evaluate.LiveEvaluator`, which evaluates the pack once per
``interval`` of the pack, and dispatches each state change to its tier's actions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvscope.alerts.actions import ActionResult, dispatch
from kvscope.alerts.evaluate import Event, LiveEvaluator, evaluate_live
from kvscope.alerts.model import RulePack


class WatchAlerts:
    """Callable ``on_tick`` hook; keeps every event and action result for the summary."""

    def __init__(
        self,
        pack: RulePack,
        write: Callable[[str], object] | None = None,
        then: Callable[[Any], None] | None = None,
    ) -> None:
        self.pack = pack
        self.live = LiveEvaluator(pack)
        self.write = write
        self.then = then
        self.events: list[Event] = []
        self.results: list[ActionResult] = []

    def __call__(self, watch: Any) -> None:
        samples = list(getattr(watch, "last_samples", []))
        if samples:
            t = max(s.t_s for s in samples)
            for ev in evaluate_live(self.live, samples, t):
                self.events.append(ev)
                self.results += dispatch(ev, self.pack, self.write)
        if self.then is not None:
            self.then(watch)

    def summary(self) -> dict[str, Any]:
        return {
            "events": len(self.events),
            "firing": [name for name, _ in self.live.evaluator.firing()],
            "actions_failed": sum(not r.ok for r in self.results),
        }
