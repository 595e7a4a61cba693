"""SGLang's mamba pool with the radix cache off: sized from ``--max-running-requests``.

Published figures: an SGLang 0.5.15 start of Qwen3.8-27B (the Qwen3.6-27B config) on one DGX
Spark with ``--mem-fraction-static 0.80 --max-running-requests 32 --disable-radix-cache`` logged
"Load weight end. ... avail mem=59.87 GB, mem usage=51.86 GB" and "KV Cache is allocated. ...
#tokens: 535124, K size: 16.33 GB, V size: 16.33 GB" (row ``sglw2-gb10-qwen38-27b-mfs080-0.5.15``;
SGLang's GB are GiB).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.plan import sglang_mamba
from kvscope.specs.hardware import GIB
from kvscope.specs.registry import load_model

CONFIG = Path(__file__).with_name("data") / "configs" / "qwen3.6-27b.json"
MODEL = load_model(str(CONFIG))
STAGES = (tuple(range(MODEL.num_layers)),)


@pytest.mark.parametrize(
    ("version", "radix", "running", "dp", "slots"),
    [
        ((0, 5, 15), True, 32, 1, None),  # radix cache on: the ratio split
        ((0, 5, 15), False, 32, 1, 32),
        ((0, 5, 23), False, 32, 4, 8),  # over the DP-attention ranks
        ((0, 5, 23), False, 2, 4, 1),  # floored at one slot
        ((0, 5, 9), False, None, 1, None),  # 0.5.9+: only with --max-running-requests
        ((0, 5, 8, 1), False, None, 1, 512),  # 0.5.6-0.5.8.post1: 512 without it
    ],
)
def test_fixed_slots_by_release(
    version: tuple[int, ...], radix: bool, running: int | None, dp: int, slots: int | None
) -> None:
    assert sglang_mamba.fixed_slots(version, radix, running, dp) == slots


def test_the_logged_pool_with_the_radix_cache_off() -> None:
    # rest = free after the weights - M0 x (1 - mfs), M0 = free at load begin (59.87 + 51.86).
    rest = (59.87 - (59.87 + 51.86) * (1 - 0.80)) * GIB
    slots, kv = sglang_mamba.kv_split(MODEL, STAGES, 1, (0, 5, 15), rest, fixed=32)
    assert slots == 32
    assert kv / GIB == pytest.approx(16.33 + 16.33, rel=0.01)
    # The ratio split the planner applied before would have left ~40 % less for the KV pool.
    _, ratio_kv = sglang_mamba.kv_split(MODEL, STAGES, 1, (0, 5, 15), rest)
    assert ratio_kv / GIB < 0.65 * (16.33 + 16.33)
    # From 0.5.17 the pool's padding slot is charged too.
    _, padded = sglang_mamba.kv_split(MODEL, STAGES, 1, (0, 5, 17), rest, fixed=32)
    per_req = sglang_mamba.per_request_bytes(MODEL, STAGES[0], 1)
    assert kv - padded == pytest.approx(per_req)
