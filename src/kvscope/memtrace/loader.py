"""Safe loading of PyTorch CUDA memory snapshot pickles.

A snapshot written by ``torch.cuda.memory._dump_snapshot`` is a plain-Python pickle: dicts,
lists, tuples, str, int, float, bool and None (the C++ producer in
``torch/csrc/cuda/Module.cpp`` builds nothing else). Loading an untrusted pickle with
``pickle.load`` can run arbitrary code, because the opcodes GLOBAL / STACK_GLOBAL / INST / OBJ /
EXT* import a callable and REDUCE calls it. Every one of those paths asks the unpickler's
``find_class`` for the callable (and PERSID / BINPERSID ask ``persistent_load``), so
:class:`SafeUnpickler` refuses both and nothing is ever imported or called. It subclasses
the C unpickler, so the container/scalar opcodes keep their native speed.

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
    except UnsafePickleError:
        raise
    except EOFError:
        raise KvscopeError(f"{label}: the snapshot file is truncated (ended mid-pickle).") from None
    except (pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        if "truncated" in first:
            raise KvscopeError(f"{label}: the snapshot file is truncated ({first}).") from None
        raise KvscopeError(f"{label}: not a readable snapshot pickle ({first}).") from None
    except MemoryError:
        raise KvscopeError(f"{label}: not enough memory to read this snapshot.") from None


def load_raw(path: str | Path) -> Any:
    """Read a snapshot file safely and return the raw object (dict, or legacy segment list).

    Raises :class:`KvscopeError` for a missing, truncated, non-pickle or non-snapshot file and
    :class:`UnsafePickleError` for a pickle that tries to import or call anything.
    """
    p = Path(path)
    if not p.is_file():
        raise KvscopeError(f"{p}: no such snapshot file.")
    with p.open("rb") as f:
        head = f.read(2)
        if not head:
            raise KvscopeError(f"{p}: the file is empty, not a memory snapshot.")
        if head[0] != 0x80 and head[:1] not in (b"(", b"]", b"}"):
            raise KvscopeError(
                f"{p}: not a pickle (a snapshot from torch.cuda.memory._dump_snapshot starts "
                "with a pickle header)."
            )
        f.seek(0)
        raw = _load_stream(f, str(p))
    check_snapshot_shape(raw, str(p))
    return raw


def check_snapshot_shape(raw: Any, label: str) -> None:
    """Raise a one-line error unless ``raw`` looks like a snapshot (new dict or legacy list)."""
    if isinstance(raw, list):
        if all(isinstance(s, dict) and "blocks" in s for s in raw[:16]):
            return
        raise KvscopeError(f"{label}: a pickled list, but not a list of memory segments.")
    if not isinstance(raw, dict):
        raise KvscopeError(
            f"{label}: the pickle holds a {type(raw).__name__!r} value, not a memory snapshot dict."
        )
    if "segments" not in raw and "device_traces" not in raw:
        keys = ", ".join(sorted(map(str, raw))[:5]) or "none"
        raise KvscopeError(
            f"{label}: not a memory snapshot (no 'segments' or 'device_traces' key; keys: {keys})."
        )
    if not isinstance(raw.get("segments", []), list) or not isinstance(
        raw.get("device_traces", []), list
    ):
        raise KvscopeError(f"{label}: 'segments' and 'device_traces' must be lists.")
