"""``simulate --calibrate RUN``: fit the cost coefficients from a measured run directory.

The fit is written only into ``--out`` (``OUT/cost.json``, for ``--cost``); the measured run
directory is never written into. Library code: :func:`kvscope.sim.calibrate.calibrate_run_dir`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvscope.cli.output import print_json, stdout
from kvscope.errors import KvscopeError

#: The file ``simulate --calibrate DIR --out OUT`` writes in OUT, for ``--cost``.
COST_FILE = "cost.json"


def calibrate_into(run_dir: Path, cfg: Any, out: Path | None, force: bool, json_out: bool) -> None:
    """Fit the cost coefficients from a measured run; write them only into ``--out``.

    ``--out`` is a run directory here as everywhere else: the coefficients go to
    ``OUT/cost.json``. The measured run directory is never written into (its files are what
    was measured), so without ``--out`` the fit is printed and nothing is saved.
    """
    from kvscope.sim.calibrate import calibrate_run_dir
    from kvscope.validate import fresh_run_dir

    if out is not None:
        if out.suffix.lower() == ".json":
            # --out once named the JSON file itself: say where the file goes now.
            raise KvscopeError(
                f"--out {out}: --out is a run directory; the fitted coefficients are written "
                f"to DIR/{COST_FILE}.",
                f"Pass e.g. --out {out.with_suffix('')} and then --cost "
                f"{out.with_suffix('') / COST_FILE}.",
            )
        fresh_run_dir(out, force=force)
    fit = calibrate_run_dir(run_dir, cfg)
    path = None if out is None else fit.coefficients.save(out / COST_FILE)
    result = {
        "coefficients": fit.coefficients,
        "fit": fit.report,
        "out": None if path is None else str(path),
    }
    if json_out:
        print_json(result)
        return
    c = fit.coefficients
    saved = (
        f"wrote {path} (use it with --cost {path})"
        if path is not None
        else "pass --out DIR to keep them (DIR/cost.json, for --cost)"
    )
    stdout.print(
        f"fitted overhead {c.overhead_s * 1e3:.2f} ms, MFU {c.mfu:.2f}, "
        f"MBU {c.mbu:.2f}{c.host_terms_text()} from {fit.report['requests_used']} requests "
        f"(TPOT error {fit.report['tpot_mape']:.1%}); {saved}"
    )
