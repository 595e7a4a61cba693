"""A per-model memo for the planner's pure helpers, keyed on the model object's identity.

A :class:`~kvscope.specs.model.ModelSpec` is hashable, but hashing it walks every layer, which
costs more than the arithmetic being cached. Searches call the planner thousands of times
with the same few model objects, so the memo keys on ``id(model)`` and keeps a reference to
the model to make sure the id is not reused. Bounded: cleared when it grows past ``limit``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

R = TypeVar("R")


def per_model_cache(limit: int = 8192) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Memoise ``fn(model, *args)`` on ``(id(model), args)``; other arguments must hash."""

    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        memo: dict[tuple[Any, ...], tuple[object, R]] = {}

        @wraps(fn)
        def wrapper(model: object, *args: Any, **kwargs: Any) -> R:
            key = (id(model), args, tuple(sorted(kwargs.items())))
            hit = memo.get(key)
            if hit is not None and hit[0] is model:
                return hit[1]
            if len(memo) >= limit:
                memo.clear()
            value = fn(model, *args, **kwargs)
            memo[key] = (model, value)
            return value

        return wrapper

    return decorate


@per_model_cache()
def attention_kinds(model: Any) -> dict[str, int]:
    """``model.attention_kinds``, memoised (it counts every layer on each access)."""
    kinds: dict[str, int] = model.attention_kinds
    return kinds


@per_model_cache()
def is_moe(model: Any) -> bool:
    """``model.is_moe``, memoised."""
    return bool(model.is_moe)
