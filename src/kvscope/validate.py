"""The one input-validation layer: numbers, text files, output paths and sizes at the boundaries.

Everything a user hands kvscope — a flag, a file, a field inside a file — passes through one of
these functions before work starts, so a bad value ends in one :class:`KvscopeError` line and
exit code 2, never in a traceback, a hang or a half-written result:

- :func:`finite` / :func:`count`: NaN and ±inf refused everywhere a number is read, ranges
  checked, integers bounded (nothing beyond int64 reaches numpy).
- :func:`read_text` / :func:`load_json` / :func:`load_yaml`: files decoded as UTF-8 with a clear
  error (missing, a directory, not text, over a size bound, malformed).
- :func:`writable_file` / :func:`fresh_run_dir`: output paths checked before the work they
  would hold; an existing run directory is refused unless ``force`` (results are never
  silently replaced).
- :func:`bounded_alloc`: a size claimed by an input is compared with the machine's memory
  before anything is allocated.

Pure standard library (plus PyYAML when a YAML file is read), so ``specs``/``plan``/``sim``
may call it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError

#: Largest integer any numeric column may hold (int64), and a file size past which a text
#: input is refused rather than read into memory (256 MiB of text).
INT64_MAX = 2**63 - 1
MAX_TEXT_BYTES = 256 * 2**20


def finite(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float within [low, high] (open ends if asked), else one error line.

    ``name`` is how the user spells the input (``--request-timeout``, ``rules.yaml: threshold``).
    """
    if isinstance(value, bool):
        raise KvscopeError(f"{name} must be a number, not {value!r}.")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise KvscopeError(f"{name} must be a number, not {_show(value)}.") from None
    if not math.isfinite(x):
        raise KvscopeError(f"{name} must be a finite number, not {_show(value)}.")
    if low is not None and (x < low or (low_open and x == low)):
        bound = f"> {_num(low)}" if low_open else f">= {_num(low)}"
        raise KvscopeError(f"{name} must be {bound}, not {_num(x)}.")
    if high is not None and (x > high or (high_open and x == high)):
        bound = f"< {_num(high)}" if high_open else f"<= {_num(high)}"
        raise KvscopeError(f"{name} must be {bound}, not {_num(x)}.")
    return x


def count(value: Any, name: str, *, low: int = 0, high: int = INT64_MAX) -> int:
    """``value`` as an integer within [low, high] (default: non-negative and within int64)."""
    if isinstance(value, bool):
        raise KvscopeError(f"{name} must be an integer, not {value!r}.")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise KvscopeError(f"{name} must be an integer, not {_show(value)}.")
        value = int(value)
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        raise KvscopeError(f"{name} must be an integer, not {_show(value)}.") from None
    if n < low:
        raise KvscopeError(f"{name} must be >= {low}, not {n}.")
    if n > high:
        raise KvscopeError(f"{name} must be <= {high:,}, not {_show(n)}.")
    return n


def _num(x: float) -> str:
    return f"{x:g}"


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------- files in


def read_text(path: str | Path, what: str = "file", *, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text file's contents; missing, directory, oversized or non-text → one line."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except (FileNotFoundError, NotADirectoryError):
        raise KvscopeError(f"{_short(p)}: no such {what}.") from None
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise KvscopeError(f"{_short(p)}: cannot read {what} ({reason}).") from None
    if p.is_dir():
        raise KvscopeError(f"{p}: is a directory, expected a {what}.")
    if not p.is_file():
        # A device or pipe (/dev/zero, a FIFO) has no size to bound: reading it could not end.
        raise KvscopeError(f"{p}: not a regular file, expected a {what}.")
    if size > max_bytes:
        raise KvscopeError(
            f"{p}: {what} is {size / 2**20:,.0f} MiB, over the {max_bytes / 2**20:,.0f} MiB limit."
        )
    try:
        data = p.read_bytes()
    except OSError as err:
        raise KvscopeError(f"{p}: cannot read {what} ({err.strerror}).") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise KvscopeError(
            f"{p}: {what} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})."
        ) from None


def load_json(path: str | Path, what: str = "JSON file") -> Any:
    """A JSON file parsed; NaN/Infinity literals are refused (they are not JSON)."""
    text = read_text(path, what)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise KvscopeError(
            f"{path}: {what} is not valid JSON ({err.msg} at line {err.lineno})."
        ) from None
    except ValueError as err:  # _no_constant
        raise KvscopeError(f"{path}: {what} {err}.") from None
    except RecursionError:
        raise KvscopeError(f"{path}: {what} is nested too deeply.") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"holds {name}, which is not a finite number")


#: A YAML document that expands, once aliases are followed, to more nodes than this is
#: refused: a few hundred bytes of nested aliases ("billion laughs") expand exponentially.
MAX_YAML_NODES = 100_000


def load_yaml(path: str | Path, what: str = "YAML file") -> Any:
    """A YAML file parsed with the safe loader; see :func:`parse_yaml`."""
    return parse_yaml(read_text(path, what), f"{path}: {what}")


def parse_yaml(text: str, source: str) -> Any:
    """YAML text parsed with the safe loader: alias bombs, syntax errors and too-deep nesting
    are one line naming ``source`` (and the line, where YAML says it)."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and _expanded_nodes(node, {}) > MAX_YAML_NODES:
            raise KvscopeError(
                f"{source} expands to more than {MAX_YAML_NODES:,} YAML nodes "
                "(aliases nested like a 'billion laughs' bomb?)."
            )
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise KvscopeError(f"{source} is not valid YAML{where}.") from None
    except RecursionError:
        raise KvscopeError(f"{source} is YAML nested too deeply.") from None


def _expanded_nodes(node: Any, memo: dict[int, int]) -> int:
    # Nodes after aliases are followed: each shared node counts once per reference, which is
    # what a constructor (and a validator after it) would walk. A cycle counts once.
    import yaml

    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1
    n = 1
    if isinstance(node, yaml.MappingNode):
        n += sum(_expanded_nodes(k, memo) + _expanded_nodes(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n += sum(_expanded_nodes(c, memo) for c in node.value)
    memo[key] = n
    return n


# ---------------------------------------------------------------------------- files out


def writable_file(path: str | Path, what: str = "output file") -> Path:
    """Check, before any work, that ``path`` can be written as a file (parents created)."""
    p = Path(path)
    _usable_name(p, what)
    if p.is_dir():
        raise KvscopeError(f"{p}: is a directory, expected a path for the {what}.")
    if p.exists() and not p.is_file():
        # Outputs are written beside and renamed over: that would replace a device or pipe
        # (/dev/null, a FIFO) with a plain file, which as root breaks the machine.
        raise KvscopeError(f"{p}: not a regular file; choose a file path for the {what}.")
    _writable_dir(p.parent if str(p.parent) else Path("."), p, what)
    if p.exists() and not os.access(p, os.W_OK):
        raise KvscopeError(f"{p}: cannot write the {what} (permission denied).")
    return p


def fresh_file(path: str | Path, *, force: bool = False, what: str = "output file") -> Path:
    """Check, before any work, that ``path`` can be written and holds no earlier result
    unless ``force`` (a file kvscope wrote before is never silently replaced)."""
    p = writable_file(path, what)
    if p.exists() and not force:
        raise KvscopeError(
            f"{p}: the {what} already exists.",
            "Pass --force to replace it, or choose another --out.",
        )
    return p


def write_text_atomic(path: str | Path, text: str, what: str = "output file") -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it and a rename, so a reader
    (or a crash) never sees half a file; parents are created; failures are one line."""
    import contextlib

    p = writable_file(path, what)
    tmp = p.with_name(p.name + ".tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise KvscopeError(f"{p}: cannot write the {what} ({err.strerror}).") from None
    return p


def writable_dir(path: str | Path, what: str = "output directory") -> Path:
    """Check that ``path`` is, or can be created as, a writable directory."""
    p = Path(path)
    _usable_name(p, what)
    if p.exists() and not p.is_dir():
        raise KvscopeError(f"{p}: is a file, expected a directory for the {what}.")
    _writable_dir(p, p, what)
    return p


def _usable_name(p: Path, what: str) -> None:
    # Path.exists()/is_dir() raise, not answer, for a name the OS cannot hold (ENAMETOOLONG).
    try:
        os.stat(p)
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        raise KvscopeError(f"{_short(p)}: cannot write the {what} (a parent is a file).") from None
    except OSError as err:
        raise KvscopeError(f"{_short(p)}: cannot use this path ({err.strerror}).") from None
    if "\x00" in str(p):
        raise KvscopeError(f"{_short(p)}: a path cannot hold a NUL character.")


def _short(p: Path) -> str:
    # Whole paths, except names too long for the OS itself, which would fill the line.
    text = str(p)
    return (
        text
        if len(text) <= 1024 and all(len(x) <= 255 for x in p.parts)
        else (text[:60] + "..." + text[-40:])
    )


def _writable_dir(d: Path, shown: Path, what: str) -> None:
    # Walk up to the first existing ancestor: it must be a directory we may write into.
    probe = d
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise KvscopeError(f"{shown}: cannot write the {what} ({probe} is a file).")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise KvscopeError(f"{shown}: cannot write the {what} ({probe}: permission denied).")


def fresh_run_dir(path: str | Path, *, force: bool = False, what: str = "run directory") -> Path:
    """Check that ``path`` may hold a new run: absent or empty, or ``force`` to replace it.

    A run directory that already holds files is refused, so a new run never mixes with or
    overwrites what an earlier one measured; ``force`` removes the earlier run's files first,
    but only from a folder that holds nothing but what kvscope writes, and never the current
    directory, one above it, or the home directory (``--out . --force`` must not empty them).
    """
    if not str(path).strip():
        raise KvscopeError(f"the {what} path is empty.", "Give --out a folder name.")
    p = writable_dir(path, what)
    try:
        occupied = p.is_dir() and any(p.iterdir())
    except OSError as err:
        raise KvscopeError(f"{p}: cannot use it for the {what} ({err.strerror}).") from None
    if occupied:
        if not force:
            raise KvscopeError(
                f"{p}: the {what} already exists and is not empty.",
                "Pass --force to replace it, or choose another --out.",
            )
        _check_replaceable(p, what)
        _clear(p)
    return p


#: What kvscope writes into run directories; a folder holding anything else is not replaced.
RUN_FILE_SUFFIXES = frozenset(
    {".json", ".jsonl", ".parquet", ".arrows", ".tmp", ".html", ".csv", ".txt", ".log",
     ".pickle", ".png", ".svg", ".yaml", ".yml"}
)  # fmt: skip


def _check_replaceable(p: Path, what: str) -> None:
    here = p.resolve()
    cwd = Path.cwd().resolve()
    if here == cwd or here in cwd.parents or here == Path.home().resolve():
        raise KvscopeError(
            f"{p}: refusing to clear it with --force (it holds the current or home directory).",
            "Choose a folder of its own for --out.",
        )
    foreign = _foreign_entry(p, depth=4)
    if foreign is not None:
        raise KvscopeError(
            f"{p}: refusing to clear it with --force: it holds {foreign}, which kvscope did not "
            "write.",
            "Choose another --out.",
        )


def _foreign_entry(d: Path, depth: int) -> str | None:
    for child in d.iterdir():
        if child.is_symlink():
            return child.name
        if child.is_dir():
            inner = _foreign_entry(child, depth - 1) if depth > 0 else child.name
            if inner is not None:
                return f"{child.name}/{inner}" if depth > 0 else inner
        elif child.suffix.lower() not in RUN_FILE_SUFFIXES:
            return child.name
    return None


def _clear(p: Path) -> None:
    import shutil

    for child in p.iterdir():
        try:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        except OSError as err:
            raise KvscopeError(
                f"{child}: cannot remove it to replace the run ({err.strerror})."
            ) from None


# ---------------------------------------------------------------------------- sizes


def machine_memory_bytes() -> int:
    """Physical memory of this machine (bytes); a large stand-in when the OS does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 2**40


def bounded_alloc(nbytes: float, what: str, hint: str | None = None) -> None:
    """Refuse, before allocating, a structure larger than half this machine's memory."""
    limit = machine_memory_bytes() // 2
    if not math.isfinite(nbytes) or nbytes > limit:
        size = "an unbounded size" if not math.isfinite(nbytes) else f"{nbytes / 2**30:,.1f} GiB"
        raise KvscopeError(
            f"{what} would need {size} of memory, more than half of this machine's "
            f"{machine_memory_bytes() / 2**30:,.0f} GiB.",
            hint,
        )
