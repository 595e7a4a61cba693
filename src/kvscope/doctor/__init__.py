"""``kvscope.doctor``: check a GPU serving host's software stack and hardware state.

Two layers, so live and offline runs share one code path:

* :mod:`~kvscope.doctor.probe` runs each command / reads each file once, with a timeout,
  into a *bundle* folder (raw outputs + ``manifest.json``);
* :mod:`~kvscope.doctor.checks` reads only that bundle and returns :class:`Check` records
  (ok / warn / fail / skipped, evidence, one-line fix).

Public API::

    report = doctor_live()                 # probe this host into a temp folder, check it
    report = doctor_live(capture_dir=p)    # ... and keep the bundle at p
    report = doctor_offline(p)             # check a bundle captured elsewhere
    report.exit_code                       # 0 ok, 1 warnings, 2 failures
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kvscope.doctor.bundle import Bundle
from kvscope.doctor.checks import run_checks
from kvscope.doctor.model import Check, DoctorReport, Status
from kvscope.doctor.probe import ProbeOptions, capture
from kvscope.errors import KvscopeError
from kvscope.validate import writable_dir

__all__ = [
    "Check",
    "DoctorReport",
    "ProbeOptions",
    "Status",
    "capture",
    "doctor_live",
    "doctor_offline",
]


def doctor_offline(bundle_dir: Path) -> DoctorReport:
    """Run every check over a captured bundle folder."""
    bundle = Bundle.load(bundle_dir)
    return DoctorReport(str(bundle_dir), "offline", tuple(run_checks(bundle)))


def doctor_live(
    capture_dir: Path | None = None, options: ProbeOptions | None = None
) -> DoctorReport:
    """Probe this host (into ``capture_dir`` if given, else a temporary folder) and check it."""
    if capture_dir is not None:
        writable_dir(capture_dir, "--capture folder")  # a parent that is a file, no permission
        if capture_dir.exists() and any(capture_dir.iterdir()):
            raise KvscopeError(
                f"--capture folder {capture_dir} exists and is not empty.",
                "Choose a new folder so no earlier bundle is overwritten.",
            )
        try:
            capture(capture_dir, options)
        except OSError as err:
            raise KvscopeError(
                f"{capture_dir}: cannot write the bundle ({err.strerror})."
            ) from None
        return DoctorReport(str(capture_dir), "live", tuple(run_checks(Bundle.load(capture_dir))))
    with tempfile.TemporaryDirectory(prefix="kvscope-doctor-") as tmp:
        root = Path(tmp)
        capture(root, options)
        return DoctorReport("live host", "live", tuple(run_checks(Bundle.load(root))))
