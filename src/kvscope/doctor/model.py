"""Records of a doctor run: one :class:`Check` per finding and the :class:`DoctorReport`.

A check has a status (``ok``, ``warn``, ``fail``, ``skipped``), the evidence it read (short
strings quoted from the captured outputs, so a reader can verify the verdict without
re-running anything) and a one-line fix. The report's exit code is the one a start-up probe
or a CI gate reads: 0 when nothing is wrong, 1 when only warnings, 2 when any check failed.
Skipped checks (a missing tool, no GPU) never change the exit code.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(enum.Enum):
    """Verdict of one check, ordered by severity for sorting and the exit code."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIPPED = "skipped"

    @property
    def severity(self) -> int:
        return {"skipped": 0, "ok": 1, "warn": 2, "fail": 3}[self.value]


@dataclass(frozen=True)
class Check:
    """One finding.

    ``id`` is stable (``driver.runtime``, ``gpu.pcie``, ``host.shm`` ...) so scripts can
    grep it; ``subject`` names what was examined (``GPU 0``, ``/dev/shm``, ``host``).
    """

    id: str
    subject: str
    status: Status
    summary: str
    evidence: tuple[str, ...] = ()
    fix: str = ""


@dataclass(frozen=True)
class DoctorReport:
    """All checks of one run over one bundle, plus where the bundle came from."""

    source: str
    mode: str  # "live" or "offline"
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for c in self.checks:
            out[c.status.value] += 1
        return out

    @property
    def exit_code(self) -> int:
        """0 all ok (or skipped), 1 at least one warning, 2 at least one failure."""
        worst = max((c.status.severity for c in self.checks), default=0)
        return {3: 2, 2: 1}.get(worst, 0)

    def by_id(self, check_id: str) -> list[Check]:
        return [c for c in self.checks if c.id == check_id]

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "mode": self.mode,
            "exit_code": self.exit_code,
            "counts": self.counts,
            "checks": [
                {
                    "id": c.id,
                    "subject": c.subject,
                    "status": c.status.value,
                    "summary": c.summary,
                    "evidence": list(c.evidence),
                    "fix": c.fix,
                }
                for c in self.checks
            ],
        }
