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


def async_scheduling(eng: EngineConfig) -> bool:
    """Whether vLLM schedules asynchronously: the flag when given, else the default (on unless
    an n-gram / suffix drafter forbids it; pipeline parallelism does not turn it off:
    ``VllmConfig.__post_init__`` of the 0.25.0, 0.27.0 and 0.31.0 wheels has no PP condition,
    only ``max_concurrent_batches`` looks at the pipeline)."""
    if eng.async_scheduling is not None:
        return eng.async_scheduling
    spec = eng.speculative
    return not (spec is not None and spec.method in NO_ASYNC_SPEC_METHODS)


def in_flight_tokens(
    batched_tokens: int,
    pp: int,
    v: tuple[int, int, int],
    async_on: bool = True,
    v2_runner: bool = False,
) -> int:
    """``VllmConfig.max_in_flight_tokens`` of release ``v``: ``max_concurrent_batches x
    max_num_batched_tokens`` from 0.26.0, where ``max_concurrent_batches`` is ``pp + 1`` under
    asynchronous scheduling on the V2 model runner, 2 under it on the V1 runner without PP,
    and the pipeline depth otherwise (vllm/config/vllm.py of the 0.25.0, 0.27.0 and 0.31.0
    wheels; 0.25.0 does not yet add it to a window group's reserve)."""
    if v < IN_FLIGHT_TOKENS_SINCE:
        return batched_tokens
    if async_on and v2_runner:
        batches = pp + 1
    elif async_on and pp <= 1:
        batches = 2
    else:
        batches = pp
    return batches * batched_tokens
