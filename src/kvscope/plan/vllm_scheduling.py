"""How many batches vLLM keeps in flight, by release: whether it schedules asynchronously
(``--async-scheduling``, its default and the drafters that turn it off) and
``VllmConfig.max_in_flight_tokens``, the tokens a sliding-window group reserves beyond its
window (vllm/config/vllm.py and vllm/v1/kv_cache_interface.py of the 0.26.0 and 0.31.0 wheels;
0.25.0 still adds the batched tokens alone). Units: tokens."""

from __future__ import annotations

from kvscope.plan.config import EngineConfig

#: First release whose sliding-window groups reserve every in-flight batch's tokens.
IN_FLIGHT_TOKENS_SINCE = (0, 26, 0)

#: Speculative methods vLLM's V1 model runner cannot schedule asynchronously: anything outside
#: ``EagleModelTypes`` (MTP types included), ``ngram_gpu``, ``draft_model``, ``dspark`` and
#: ``dflash`` turns the default off (vllm/config/vllm.py at v0.33.0, ``VllmConfig``
#: ``__post_init__``: ``v1_async_sched_incompat``).
NO_ASYNC_SPEC_METHODS = frozenset({"ngram", "suffix", "custom_class"})


def async_scheduling(eng: EngineConfig, pp: int) -> bool:
    """Whether vLLM schedules asynchronously: the flag when given, else the default (on
    unless pipeline parallelism on the V1 runner or an n-gram / suffix drafter forbids it)."""
    if eng.async_scheduling is not None:
        return eng.async_scheduling
    spec = eng.speculative
    return pp <= 1 and not (spec is not None and spec.method in NO_ASYNC_SPEC_METHODS)


def in_flight_tokens(
    batched_tokens: int, pp: int, v: tuple[int, int, int], async_on: bool | None = None
) -> int:
    """``VllmConfig.max_in_flight_tokens`` of release ``v`` (the module text).

    From 0.26.0: 2 batches under asynchronous scheduling (``async_on``; None = its default,
    on without PP), else the pipeline depth; the V2 runner's ``pp + 1`` under PP is not
    modelled.
    """
    if v < IN_FLIGHT_TOKENS_SINCE:
        return batched_tokens
    on = pp <= 1 if async_on is None else async_on
    batches = 2 if on and pp <= 1 else pp
    return batches * batched_tokens
