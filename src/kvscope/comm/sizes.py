"""Message-size sweeps as users type them: ``1K:64M:x2``, ``4K:1M:+256K``, ``8K,1M``.

Suffixes are binary, as in nccl-tests' ``-b/-e`` flags (``K`` = 1024, ``M`` = 1024**2,
``G`` = 1024**3; an optional trailing ``B`` or ``iB`` is accepted). All sizes in bytes.
"""

from __future__ import annotations

import re

from kvscope.errors import KvscopeError
from kvscope.validate import finite

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:I?B)?\s*$", re.I)

#: A sweep longer than this is almost certainly a typo (``x1.0001``); refuse it.
MAX_POINTS = 64
#: No collective message is larger than this (1 TiB); a larger size is a typo.
MAX_SIZE = 1 << 40


def parse_size(text: str) -> int:
    """``"64M"`` -> 67108864."""
    m = _SIZE.match(text)
    if not m:
        raise KvscopeError(f"cannot read size '{text}'.", "Use bytes with K, M or G: 4K, 64M.")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < 1:
        raise KvscopeError(f"size '{text}' is below one byte.")
    if value > MAX_SIZE:
        raise KvscopeError(f"size '{text}' is above {format_size(MAX_SIZE)} (1 TiB).")
    return int(value)


def format_size(nbytes: int) -> str:
    """67108864 -> ``"64M"``; sizes that are not a whole unit keep their bytes."""
    for unit in ("G", "M", "K"):
        if nbytes >= _UNITS[unit] and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


def parse_sweep(text: str) -> list[int]:
    """Sizes in bytes from ``START:END:xFACTOR``, ``START:END:+STEP`` or ``A,B,C``."""
    if "," in text or ":" not in text:
        listed = [parse_size(part) for part in text.split(",") if part.strip()]
        if not listed:
            raise KvscopeError("--sizes is empty.")
        return listed
    parts = text.split(":")
    if len(parts) != 3:
        raise KvscopeError(f"cannot read sweep '{text}'.", "Use START:END:xFACTOR, e.g. 1K:64M:x2.")
    start, end, step = parse_size(parts[0]), parse_size(parts[1]), parts[2].strip()
    if end < start:
        raise KvscopeError(f"sweep '{text}' ends ({end} B) before it starts ({start} B).")
    sizes: list[int] = []
    if step[:1] in ("x", "*"):
        factor = finite(step[1:], f"the sweep factor in '{text}'", low=1.0, low_open=True)
        value = float(start)
        while value <= end * (1 + 1e-9) and len(sizes) <= MAX_POINTS:
            sizes.append(round(value))
            value *= factor
    elif step[:1] == "+":
        inc = parse_size(step[1:])
        value_i = start
        while value_i <= end and len(sizes) <= MAX_POINTS:
            sizes.append(value_i)
            value_i += inc
    else:
        raise KvscopeError(f"cannot read sweep step '{step}'.", "Use xFACTOR or +STEP.")
    if len(sizes) > MAX_POINTS:
        raise KvscopeError(f"sweep '{text}' has more than {MAX_POINTS} sizes.")
    return sizes
