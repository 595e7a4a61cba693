"""One executor for every many-point job (``tune``, ``simulate --sweep``): a local process
pool by default, a Ray cluster with ``--ray auto|ADDRESS``; points are saved to the run
directory as they finish, so a rerun resumes and a crash loses nothing measured.

Public API: :func:`run_points` (run tasks, skipping those already saved), :class:`PointStore`
(one folder per finished point), :func:`parse_backend` (``--ray`` / ``--workers`` to a
:class:`Backend`). Ray is imported only by :mod:`kvscope.executor.ray_backend`.
"""

from kvscope.executor.core import Backend, PointTask, parse_backend, run_points
from kvscope.executor.store import PointResult, PointStore

__all__ = ["Backend", "PointResult", "PointStore", "PointTask", "parse_backend", "run_points"]
