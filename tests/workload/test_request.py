"""The Request row validates itself."""

from __future__ import annotations

import dataclasses

import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.request import Request


def test_request_is_frozen_and_totals() -> None:
    r = Request("a", 1.5, 100, 20)
    assert r.total_tokens == 120
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.prompt_tokens = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"prompt_tokens": 0}, "prompt_tokens"),
        ({"output_tokens": -1}, "output_tokens"),
        ({"arrival_s": -0.1}, "arrival_s"),
        ({"prefix_hashes": (1, 2)}, "hash_block_size"),
    ],
)
def test_bad_requests_are_user_errors(kw: dict[str, object], msg: str) -> None:
    base: dict[str, object] = {
        "request_id": "x",
        "arrival_s": 0.0,
        "prompt_tokens": 1,
        "output_tokens": 1,
    }
    base.update(kw)
    with pytest.raises(KvscopeError, match=msg):
        Request(**base)  # type: ignore[arg-type]
