"""Which file format ``kvscope telemetry export`` writes: named by ``--format`` or the extension.

A file's extension tells every tool that opens it what is inside, so the format follows it:
``.parquet`` (Apache Parquet), ``.csv`` (comma-separated, one header row) and ``.jsonl`` /
``.ndjson`` (one JSON object per line, as in the JSON Lines and NDJSON conventions). An
extension kvscope does not know is refused unless ``--format`` names the format, and a
``--format`` that contradicts a known extension (CSV in ``x.parquet``) is refused too.
"""

from __future__ import annotations

from pathlib import Path

from kvscope.errors import KvscopeError

#: Format names ``--format`` takes, in the order help lists them.
FORMATS = ("parquet", "csv", "jsonl")
#: Extension (lower case) -> format.
EXTENSIONS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def export_format(out: str | Path, fmt: str | None = None) -> str:
    """The format to write ``out`` in: ``fmt`` if given (checked), else from the extension."""
    suffix = Path(out).suffix.lower()
    implied = EXTENSIONS.get(suffix)
    known = ", ".join(EXTENSIONS)
    if fmt is not None:
        name = fmt.strip().lower()
        if name == "ndjson":
            name = "jsonl"
        if name not in FORMATS:
            raise KvscopeError(f"unknown export format '{fmt}'.", f"Use {', '.join(FORMATS)}.")
        if implied is not None and implied != name:
            raise KvscopeError(
                f"--format {name} contradicts the --out extension {suffix} (a {implied} file).",
                f"Name the file *.{name} or drop --format.",
            )
        return name
    if implied is None:
        shown = suffix or "no extension"
        raise KvscopeError(
            # The path itself is not echoed: it may be a URL with a password typed by mistake.
            f"cannot tell the export format from the --out extension ('{shown}').",
            f"End the file name with {known}, or pass --format {'|'.join(FORMATS)}.",
        )
    return implied
