"""Safe loading of PyTorch CUDA memory snapshot pickles.

A snapshot written by ``torch.cuda.memory._dump_snapshot`` is a plain-Python pickle: dicts,
lists, tuples, str, int, float, bool and None (the C++ producer in
``torch/csrc/cuda/Module.cpp`` builds nothing else). Loading an untrusted pickle with
``pickle.load`` can run arbitrary code, because the opcodes GLOBAL / STACK_GLOBAL / INST / OBJ /
EXT* import a callable and REDUCE calls it. Every one of those paths asks the unpickler's
``find_class`` for the callable (and PERSID / BINPERSID ask ``persistent_load``), so
:class:`SafeUnpickler` refuses both and nothing is ever imported or called. It subclasses
the C unpickler, so the container/scalar opcodes keep their native speed.

The opcodes that remain can still be misused: BUILD on a dict (``N}b``) asks a builtin for an
``__dict__`` it does not have, a length field can claim more bytes than the file holds. None of
that runs code, but each surfaces as some exception of the unpickler; every one of them means
"not a CUDA memory snapshot" and becomes one :class:`KvscopeError` line, never a traceback.

This module owns reading bytes into the raw Python object, with one-line errors; the
conversion into columns lives in :mod:`kvscope.memtrace.columns`.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any, BinaryIO

from kvscope.errors import KvscopeError


class UnsafePickleError(KvscopeError):
    """The pickle asked for a global (a function or class): refused, nothing executed."""


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that admits only containers and scalars and never imports anything."""

    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickleError(
            f"refused to load: the pickle asks for '{module}.{name}' "
            "(a real snapshot holds only dicts, lists, strings and numbers); nothing was executed."
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(
            "refused to load: the pickle uses persistent ids, which a snapshot never does; "
            "nothing was executed."
        )


def safe_loads(data: bytes) -> Any:
    """Unpickle ``data`` with :class:`SafeUnpickler` (used by tests and small inputs)."""
    return _load_stream(io.BytesIO(data), "<bytes>")


def _load_stream(stream: BinaryIO, label: str) -> Any:
    try:
        return SafeUnpickler(stream).load()
    except KvscopeError:  # UnsafePickleError: refused, nothing executed
        raise
    except EOFError:
        raise KvscopeError(f"{label}: the snapshot file is truncated (ended mid-pickle).") from None
    except MemoryError:
        raise KvscopeError(
            f"{label}: not a CUDA memory snapshot (a length in the pickle asks for more memory "
            "than this machine has)."
        ) from None
    except RecursionError:
        raise KvscopeError(f"{label}: not a CUDA memory snapshot (nested too deeply).") from None
    except Exception as err:
        # Whatever the C unpickler raises on hostile or damaged bytes (UnpicklingError,
        # AttributeError from BUILD on a builtin, ValueError, OverflowError, ...): the file
        # is not a snapshot. Nothing was executed; find_class refused every import.
        first = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        if "truncated" in first or "ran out of input" in first.lower():
            raise KvscopeError(f"{label}: the snapshot file is truncated ({first}).") from None
        raise KvscopeError(
            f"{label}: not a CUDA memory snapshot (unreadable pickle: {first})."
        ) from None


def load_raw(path: str | Path) -> Any:
    """Read a snapshot file safely and return the raw object (dict, or legacy segment list).

    Raises :class:`KvscopeError` for a missing, truncated, non-pickle or non-snapshot file and
    :class:`UnsafePickleError` for a pickle that tries to import or call anything.
    """
    p = Path(path)
    check_snapshot_path(p)
    try:
        f = p.open("rb")
    except OSError as err:
        raise KvscopeError(f"{p}: cannot read the snapshot file ({err.strerror}).") from None
    with f:
        head = f.read(2)
        if not head:
            raise KvscopeError(f"{p}: the file is empty, not a CUDA memory snapshot.")
        if head[0] != 0x80 and head[:1] not in (b"(", b"]", b"}"):
            raise KvscopeError(
                f"{p}: not a pickle, so not a CUDA memory snapshot (a snapshot from "
                "torch.cuda.memory._dump_snapshot starts with a pickle header)."
            )
        f.seek(0)
        raw = _load_stream(f, str(p))
    check_snapshot_shape(raw, str(p))
    return raw


def check_snapshot_path(p: Path) -> None:
    """One line when ``p`` is missing, a directory or not a regular file."""
    if p.is_dir():
        raise KvscopeError(f"{p}: is a directory, not a memory snapshot file.")
    if not p.exists():
        raise KvscopeError(f"{p}: no such snapshot file.")
    if not p.is_file():
        raise KvscopeError(f"{p}: not a regular file, not a memory snapshot.")


def check_snapshot_shape(raw: Any, label: str) -> None:
    """Raise a one-line error unless ``raw`` looks like a snapshot (new dict or legacy list)."""
    if isinstance(raw, list):
        if all(isinstance(s, dict) and "blocks" in s for s in raw[:16]):
            return
        raise KvscopeError(
            f"{label}: not a CUDA memory snapshot (a pickled list, but not a list of memory "
            "segments)."
        )
    if not isinstance(raw, dict):
        raise KvscopeError(
            f"{label}: not a CUDA memory snapshot (the pickle holds a "
            f"{type(raw).__name__!r} value, not a snapshot dict)."
        )
    if "segments" not in raw and "device_traces" not in raw:
        names = sorted(k[:40] for k in raw if isinstance(k, str))[:5]
        keys = ", ".join(names) or "none"
        raise KvscopeError(
            f"{label}: not a CUDA memory snapshot (no 'segments' or 'device_traces' key; "
            f"keys: {keys})."
        )
    if not isinstance(raw.get("segments", []), list) or not isinstance(
        raw.get("device_traces", []), list
    ):
        raise KvscopeError(
            f"{label}: not a CUDA memory snapshot ('segments' and 'device_traces' must be lists)."
        )
