"""KV occupancy from a real llama-server /slots body (recorded from the server built by
scripts/build_llama_server.sh, 4 slots x 1024 context, three requests decoding)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.telemetry.llamacpp import slots_usage

FIX = Path(__file__).parent / "fixtures"


def test_recorded_slots_golden() -> None:
    use = slots_usage((FIX / "llamacpp_slots.json").read_text())
    # Busy slots 0, 1, 2: (45 + 26) + (45 + 26) + (44 + 25) = 211 tokens; idle slot 3 is free
    # even though it holds a 417-token cached prompt.
    assert use.used_tokens == 211
    assert use.capacity_tokens == 4096 and use.slots == 4 and use.busy_slots == 3
    assert use.usage_ratio == pytest.approx(211 / 4096)


def test_bad_slots_bodies() -> None:
    for body in ("not json", '{"a": 1}', '[{"id": 0}]'):
        with pytest.raises(KvscopeError):
            slots_usage(body)
    assert slots_usage("[]").usage_ratio == 0.0
