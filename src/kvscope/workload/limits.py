"""Size bounds of a workload, checked before anything is drawn or allocated.

A synthetic stream's size is known from its flags (``--num-requests``, or the arrival rate
times ``--duration``) before a single arrival is drawn, so a typo is refused in one line
instead of ending in a multi-TiB allocation.
"""

from __future__ import annotations

import math

from kvscope.errors import KvscopeError
from kvscope.validate import bounded_alloc

#: Most requests one workload may hold: a hundred million (an Azure week is a few tens of
#: millions). Past it a synthetic stream is refused before anything is drawn, so a typo such
#: as ``--num-requests 10**15`` or ``rate=1e9 --duration 1e6`` is one error line rather than a
#: multi-TiB allocation.
MAX_REQUESTS = 100_000_000
#: Memory one request takes while a workload is built (three numeric columns, its id string
#: and the generator's temporaries), for the machine-memory bound.
BYTES_PER_REQUEST = 128


def check_request_count(n: float, what: str = "the workload") -> None:
    """Refuse, before drawing anything, a stream of ``n`` requests too large to build."""
    hint = "Lower --num-requests, --duration or the arrival rate."
    if not math.isfinite(n) or n > MAX_REQUESTS:
        size = "an unbounded number of" if not math.isfinite(n) else f"about {n:,.0f}"
        raise KvscopeError(
            f"{what}: {size} requests, more than kvscope's limit of {MAX_REQUESTS:,}.", hint
        )
    bounded_alloc(n * BYTES_PER_REQUEST, f"{what} ({n:,.0f} requests)", hint)
