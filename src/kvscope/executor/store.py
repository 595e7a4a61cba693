"""Finished points on disk: one run directory per point, written whole or not at all.

A point's folder (``ROOT/<key>/``) is written under a temporary name (``ROOT/.<key>.tmp``)
and renamed into place once its ``summary.json`` is written, so a folder named after a key is
always complete: a job killed at any moment leaves every finished point readable and no
half-written one that a rerun would mistake for finished. ``summary.json`` carries the
point's ``point_key``; a folder whose key does not match is not taken as that point.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from kvscope.errors import KvscopeError
from kvscope.results import RunDir, read_summary

#: Characters a point key may hold (it names a folder).
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=,+-]{0,199}$")


@dataclass(frozen=True)
class PointResult:
    """What one point's work returns: its configuration and figures (``summary.json``) and
    its tables (``<name>.parquet``), for a run directory of ``kind``."""

    config: Mapping[str, Any]
    figures: Mapping[str, Any]
    tables: Mapping[str, pa.Table] = field(default_factory=dict)
    kind: str = "simulate"


class PointStore:
    """The folder of a many-point job's finished points (``root/<key>/``)."""

    def __init__(self, root: str | Path, fingerprints: Mapping[str, str] | None = None) -> None:
        """``fingerprints`` (key -> text): a saved point counts as finished only when it was
        saved with the same text (the same configuration and workload under a folder name
        that does not say them all, as a sweep's ``block-size=16``)."""
        self.root = Path(root)
        self.fingerprints = dict(fingerprints or {})

    def path(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"point key {key!r} cannot name a folder")
        return self.root / key

    def load(self, key: str) -> dict[str, Any] | None:
        """The saved figures of point ``key``, or None when it has not finished."""
        d = self.path(key)
        try:
            summary = read_summary(d)
        except KvscopeError:
            return None  # unreadable: simulate it again
        if summary is None or summary.get("point_key") != key:
            return None
        if summary.get("point_fingerprint") != self.fingerprints.get(key):
            return None
        figures = summary.get("point_figures")
        return figures if isinstance(figures, dict) else None

    def save(self, key: str, result: PointResult) -> dict[str, Any]:
        """Write the point's run directory (atomically) and return its figures as saved."""
        final = self.path(key)
        tmp = self.root / f".{key}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        run = RunDir(tmp, result.kind, force=True)
        for name, table in result.tables.items():
            with run.table(name, table.schema) as w:
                for batch in table.to_batches(max_chunksize=65536):
                    w.append_batch(batch)
        figures = dict(result.figures)
        run.write_summary(
            result.config,
            figures,
            point_figures=figures,
            point_key=key,
            point_fingerprint=self.fingerprints.get(key),
        )
        if final.exists():
            shutil.rmtree(final)  # an unfinished or foreign point of the same name
        os.replace(tmp, final)
        saved = self.load(key)
        if saved is None:
            raise KvscopeError(f"{final}: the point could not be read back after writing.")
        return saved
