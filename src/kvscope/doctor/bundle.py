"""The bundle: a folder of raw captured outputs plus ``manifest.json``.

Every check reads only from a :class:`Bundle`, never from the live system. A live run
captures into a bundle (a temporary folder, or the ``--capture DIR`` the user asked for) and
then checks it; ``--from DIR`` checks a bundle someone sent. So live and offline runs share
one code path and a verdict can always be reproduced from the files that produced it.

``manifest.json`` (schema version 1) lists one :class:`ProbeRecord` per probe: what was run or
read, how it ended (``ok``, ``missing``, ``timeout``, ``failed``, ``error``), its exit code,
how long it took in seconds, and the file holding the raw output (stdout; stderr is kept in
the record when short).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from kvscope.errors import KvscopeError
from kvscope.validate import load_json

MANIFEST = "manifest.json"
SCHEMA_VERSION = 1

ProbeStatus = Literal["ok", "missing", "timeout", "failed", "error"]


class ProbeRecord(BaseModel):
    """One probe's outcome as stored in ``manifest.json``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    source: str
    status: ProbeStatus
    file: str | None = None
    returncode: int | None = None
    duration_s: float = 0.0
    stderr: str = ""


class Manifest(BaseModel):
    """The bundle's table of contents."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA_VERSION
    kvscope_version: str = ""
    created_utc: str = ""
    mode: str = "live"
    probes: list[ProbeRecord] = []


@dataclass(frozen=True)
class Captured:
    """A probe's record and, when it produced output, that output's text."""

    record: ProbeRecord
    text: str | None

    @property
    def ok(self) -> bool:
        return self.record.status == "ok" and self.text is not None

    def why_not(self) -> str:
        """Human reason why there is no usable output (for skipped checks' evidence)."""
        r = self.record
        detail = f": {r.stderr.strip().splitlines()[0]}" if r.stderr.strip() else ""
        if r.status == "missing":
            return f"{r.source}: not available on this host{detail}"
        if r.status == "timeout":
            return f"{r.source}: timed out after {r.duration_s:.1f} s"
        if r.status == "failed":
            return f"{r.source}: exit code {r.returncode}{detail}"
        if r.status == "error":
            return f"{r.source}: {detail.lstrip(': ') or 'error'}"
        return f"{r.source}: no output"


class Bundle:
    """Read access to a captured bundle folder."""

    def __init__(self, root: Path, manifest: Manifest) -> None:
        self.root = root
        self.manifest = manifest
        self._records = {p.name: p for p in manifest.probes}

    @classmethod
    def load(cls, root: Path) -> Bundle:
        """Open ``root``; raise :class:`KvscopeError` when it is not a doctor bundle."""
        path = root / MANIFEST
        if root.is_file():
            raise KvscopeError(
                f"{root}: is a file, not a bundle folder.", "Pass the folder that holds it."
            )
        if not root.is_dir():
            raise KvscopeError(f"no such bundle folder: {root}.")
        if not path.is_file():
            raise KvscopeError(
                f"{root} has no {MANIFEST}; it is not a doctor bundle.",
                "Create one with: kvscope doctor --capture DIR",
            )
        # A bundle comes from someone else: its manifest may be anything (not UTF-8, not
        # JSON, nested too deeply); load_json turns each into one error line.
        try:
            data = load_json(path, "manifest")
        except KvscopeError as err:
            why = err.message.removeprefix(f"{path}: ").rstrip(".")
            raise KvscopeError(f"{path}: not a valid doctor manifest ({why}).") from None
        try:
            manifest = Manifest.model_validate(data)
        except ValidationError as err:
            first = str(err).splitlines()[0]
            raise KvscopeError(f"{path}: not a valid doctor manifest ({first}).") from None
        if manifest.schema_version > SCHEMA_VERSION:
            raise KvscopeError(
                f"{path}: schema_version {manifest.schema_version} is newer than this "
                f"kvscope understands ({SCHEMA_VERSION}).",
                "Upgrade kvscope.",
            )
        return cls(root, manifest)

    def get(self, name: str) -> Captured:
        """The captured output of probe ``name``; absent probes read as ``missing``."""
        rec = self._records.get(name)
        if rec is None:
            rec = ProbeRecord(name=name, source=name, status="missing")
            return Captured(rec, None)
        text = None
        if rec.file is not None and ("/" in rec.file or rec.file.startswith(".")):
            # a bundle comes from someone else: never follow a path out of its folder
            bad = rec.model_copy(
                update={"status": "error", "stderr": f"unsafe file name {rec.file!r}"}
            )
            return Captured(bad, None)
        if rec.file is not None:
            f = self.root / rec.file
            if f.is_file():
                try:
                    text = f.read_text(errors="replace")
                except OSError as err:
                    bad = rec.model_copy(update={"status": "error", "stderr": err.strerror or ""})
                    return Captured(bad, None)
        return Captured(rec, text)

    def text(self, name: str) -> str | None:
        c = self.get(name)
        return c.text if c.ok else None

    def json(self, name: str) -> object | None:
        """Parsed JSON output of a probe, or None when absent or unreadable."""
        t = self.text(name)
        if t is None:
            return None
        try:
            data: object = json.loads(t)
            return data
        except (ValueError, RecursionError):  # bad JSON, or nested past the parser's stack
            return None
