"""SGLang's mamba pool (per-request linear-attention state) beside its KV pool, 0.5.6-0.5.23.

Units: bytes. Source: ``ModelRunner.handle_max_mamba_cache`` (srt/model_executor/
model_runner.py in the 0.5.6 wheel; model_runner_kv_cache_mixin.py in the 0.5.8.post1-0.5.15
wheels) and ``KVCacheConfigurator._handle_max_mamba_cache`` (srt/mem_cache/
kv_cache_configurator.py in the 0.5.16-0.5.23 wheels), called from the pool profile whenever
the model has linear-attention ("mambaish") layers. With no ``--max-mamba-cache-size``, no
speculative decoding and the radix cache on (the defaults), the ``rest`` left for the pools is
split by ``--mamba-full-memory-ratio`` (0.9 in every one of those releases: a ``ServerArgs``
default to 0.5.19, the ``fallback`` of arg_groups/fields/schedule.py from 0.5.20):

    mamba budget          = rest x ratio / (1 + ratio)
    0.5.6-0.5.16:  max_mamba_cache_size = floor(budget / per_req)
                   rest for the KV pool = rest - max_mamba_cache_size x per_req
    0.5.17-0.5.23: max_mamba_cache_size = floor((budget - per_req) / per_req)
                   rest for the KV pool = rest - (max_mamba_cache_size + 1) x per_req

The 0.5.17 form counts the pool's padding slot, so the KV pool keeps the same bytes and the
logged ``max_mamba_cache_size`` is one lower. ``per_req`` is ``mamba_cache_per_req`` of every
linear layer of the model up to 0.5.16 (the split charges global bytes even under pipeline
parallelism); from 0.5.17 it is the share of the stage with the most linear layers
(``pp_layer_scale``), the same on every rank. Every release read caps the running requests
at ``max_mamba_cache_size // _calculate_mamba_ratio()`` (:func:`slots_per_request`), which
moves no KV token but bounds ``--max-running-requests``. The replay-SSM ring
(``--enable-linear-replayssm-spec``, off) and ``extra_mamba_cache_bytes_per_req`` (never set in
0.5.22-0.5.23) add nothing at the defaults.

``mamba_cache_per_req`` (``BaseLinearStateParams``, srt/configs/mamba_utils.py) is the conv
window plus the recurrent state of every linear layer given, heads split over attention
TP (the shapes of kvscope's :meth:`AttentionLayer.gdn_state_bytes`), in SGLang's own dtypes
(``mamba2_state_dtype``): the conv window in ``SGLANG_MAMBA_CONV_DTYPE`` (bfloat16 by default),
the recurrent state in the config's ``mamba_ssm_dtype`` and float32 when the config names none
(vLLM keeps that case in the model dtype; Qwen3-Next's config names none, Qwen3.5's float32).
Under speculative decoding the engine also reserves intermediate states per draft token
(sized from ``--max-running-requests``), which kvscope does not plan. Releases outside the
range checked here are refused rather than guessed.

With ``--disable-radix-cache`` the pool is not split by the ratio but sized from the running
requests (:func:`fixed_slots`): ``max_mamba_cache_size = max_running_requests`` (over the
DP-attention ranks), in 0.5.6-0.5.8.post1 also when ``--max-running-requests`` is unset (then
512), from 0.5.9 only when it is set (``handle_max_mamba_cache``, model_runner.py at 0.5.6,
model_runner_kv_cache_mixin.py at 0.5.8.post1, 0.5.9 and 0.5.14; ``_handle_max_mamba_cache``,
kv_cache_configurator.py at 0.5.23, which also floors it at 1). The KV pool keeps ``rest``
less those slots, plus the padding slot from 0.5.17 as above.
"""

from __future__ import annotations

import dataclasses
import math

from kvscope.specs.model import ModelSpec

#: ``mamba_full_memory_ratio`` default (0.5.6, 0.5.8.post1, 0.5.9, 0.5.14-0.5.23 wheels).
MAMBA_FULL_MEMORY_RATIO = 0.9
#: Releases whose wheels hold the ratio split above (checked: 0.5.6, 0.5.8.post1, 0.5.9 and
#: every wheel from 0.5.14 to 0.5.23).
SINCE = (0, 5, 6)
UNTIL = (0, 5, 23)
#: First release that charges the padding slot and the largest stage's share (0.5.17 wheel's
#: ``_handle_max_mamba_cache``: ``pp_layer_scale``, ``(K + 1) x stage_per_req``).
PADDED_STAGE_SINCE = (0, 5, 17)
#: First release whose ``auto`` mamba radix strategy resolves to ``extra_buffer`` when the
#: overlap scheduler is on (``ServerArgs._handle_mamba_radix_cache``, server_args.py 0.5.14;
#: ``_mamba_radix_cache_resolution`` in arg_groups/overrides.py 0.5.16-0.5.23); 0.5.8.post1-0.5.13
#: resolve ``auto`` to ``no_buffer`` and 0.5.6 has no extra buffer.
EXTRA_BUFFER_SINCE = (0, 5, 14)
#: ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` and the ping-pong slots ``extra_buffer``
#: adds with overlap (``MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP``; ``get_mamba_tracking_slots``
#: from 0.5.22), 0.5.6-0.5.23.
BASE_SLOTS = 3
EXTRA_BUFFER_SLOTS = 2
#: Bytes of one conv-window element (``SGLANG_MAMBA_CONV_DTYPE`` default bfloat16) and of one
#: recurrent-state element when the config names no ``mamba_ssm_dtype`` (float32).
CONV_STATE_BYTES = 2.0
DEFAULT_SSM_STATE_BYTES = 4.0


def modelled(version: tuple[int, ...]) -> bool:
    """Whether ``version``'s mamba pool rule is the one this module plans."""
    return SINCE <= version[:3] <= UNTIL


def per_request_bytes(model: ModelSpec, layers: tuple[int, ...], attn_tp: int) -> int:
    """``mamba_cache_per_req`` on one GPU: the state of the stage's Gated DeltaNet layers."""
    total = 0
    for i in layers:
        att = model.layers[i].attention
        if att.kind == "gdn":
            ssm = att.ssm_state_bytes if att.ssm_dtype_named else DEFAULT_SSM_STATE_BYTES
            sglang = dataclasses.replace(
                att, conv_state_bytes=CONV_STATE_BYTES, ssm_state_bytes=ssm
            )
            total += sglang.gdn_state_bytes(attn_tp)
    return total


def charged_bytes(
    model: ModelSpec, stages: tuple[tuple[int, ...], ...], attn_tp: int, version: tuple[int, ...]
) -> int:
    """The ``per_req`` every stage's split charges: the whole model's state before 0.5.17,
    the largest stage's share from 0.5.17 (layers are uniform, so the share is the sum)."""
    if version[:3] < PADDED_STAGE_SINCE:
        return per_request_bytes(model, tuple(i for s in stages for i in s), attn_tp)
    return max(per_request_bytes(model, s, attn_tp) for s in stages)


def split(
    rest: float,
    per_req: int,
    ratio: float = MAMBA_FULL_MEMORY_RATIO,
    padding_slot: bool = False,
) -> tuple[int, float]:
    """(``max_mamba_cache_size``, bytes left for the KV pool) from the pools' ``rest``;
    ``padding_slot``: the 0.5.17+ form, which also charges the pool's padding slot."""
    if per_req <= 0 or rest <= 0:
        return 0, rest
    budget = rest * ratio / (1 + ratio)
    if padding_slot:
        size = math.floor((budget - per_req) / per_req)
        return size, rest - (size + 1) * per_req
    size = math.floor(budget / per_req)
    return size, rest - size * per_req


#: First release that sizes the pool from ``--max-running-requests`` only when it is set
#: (0.5.9 wheel; 0.5.6 and 0.5.8.post1 fall back to 512 slots without it).
FIXED_NEEDS_RUNNING_SINCE = (0, 5, 9)
#: ``max_mamba_cache_size`` of 0.5.6-0.5.8.post1 with the radix cache off and no running cap.
UNCAPPED_FIXED_SLOTS = 512


def fixed_slots(
    version: tuple[int, ...],
    radix_cache: bool,
    max_running_requests: int | None,
    attn_dp: int = 1,
) -> int | None:
    """``max_mamba_cache_size`` when SGLang sizes the pool from the running requests (radix
    cache off), else ``None`` (the ratio split of :func:`split`)."""
    if radix_cache:
        return None
    if max_running_requests is None:
        if version[:3] >= FIXED_NEEDS_RUNNING_SINCE:
            return None
        return UNCAPPED_FIXED_SLOTS // max(1, attn_dp)
    return max(1, max_running_requests // max(1, attn_dp))


def kv_split(
    model: ModelSpec,
    stages: tuple[tuple[int, ...], ...],
    attn_tp: int,
    version: tuple[int, ...],
    rest: float,
    fixed: int | None = None,
) -> tuple[int, float]:
    """(``max_mamba_cache_size``, bytes of ``rest`` left for one stage's KV pool) after
    ``version``'s mamba split; ``fixed``: the slots :func:`fixed_slots` gives, if any."""
    per_req = charged_bytes(model, stages, attn_tp, version)
    padded = version[:3] >= PADDED_STAGE_SINCE
    if fixed is not None:
        return fixed, rest - (fixed + int(padded)) * per_req
    return split(rest, per_req, padding_slot=padded)


def slots_per_request(version: tuple[int, ...], radix_cache: bool, pp: int) -> int:
    """``_calculate_mamba_ratio()``: mamba slots a running request holds at ``version``.

    1 without the radix cache; 3 with it, plus the two ping-pong slots of ``extra_buffer``
    from 0.5.14, where ``auto`` picks it for Qwen3-Next / Qwen3.5 with the overlap scheduler
    on and the default triton linear-attention backend. Pipeline parallelism turns the
    overlap scheduler off first (``_handle_pipeline_parallelism``), so ``auto`` stays
    ``no_buffer`` there.
    """
    if not radix_cache:
        return 1
    if version[:3] >= EXTRA_BUFFER_SINCE and pp == 1:
        return BASE_SLOTS + EXTRA_BUFFER_SLOTS
    return BASE_SLOTS
