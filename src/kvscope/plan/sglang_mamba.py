"""SGLang's mamba pool (per-request linear-attention state) beside its KV pool, 0.5.6-0.5.14.

Units: bytes. Source: ``ModelRunner.handle_max_mamba_cache`` (srt/model_executor/
model_runner.py in the 0.5.6 wheel; model_runner_kv_cache_mixin.py in the 0.5.8.post1, 0.5.9
and 0.5.14 wheels), called from the pool profile whenever the model has linear-attention
("mambaish") layers. With no ``--max-mamba-cache-size``, no speculative decoding and the radix
cache on (the defaults), the ``rest`` left for the pools is split by
``--mamba-full-memory-ratio`` (``ServerArgs.mamba_full_memory_ratio = 0.9`` in every one of
those releases):

    mamba budget          = rest x ratio / (1 + ratio)
    max_mamba_cache_size  = floor(mamba budget / mamba_cache_per_req)
    rest for the KV pool  = rest - max_mamba_cache_size x mamba_cache_per_req

``mamba_cache_per_req`` (``BaseLinearStateParams``, srt/configs/mamba_utils.py) is the conv
window plus the recurrent state of every linear layer of the stage, heads split over attention
TP (the shapes of kvscope's :meth:`AttentionLayer.gdn_state_bytes`), in SGLang's own dtypes
(``mamba2_state_dtype``): the conv window in ``SGLANG_MAMBA_CONV_DTYPE`` (bfloat16 by default),
the recurrent state in the config's ``mamba_ssm_dtype`` and float32 when the config names none
(vLLM keeps that case in the model dtype; Qwen3-Next's config names none, Qwen3.5's float32).
Under speculative decoding the engine also reserves intermediate states per draft token
(sized from ``--max-running-requests``), which kvscope does not plan. The 0.5.23 wheel moved
the pool profile to ``pool_configurator.py``; releases outside the range checked here are
refused rather than guessed.
"""

from __future__ import annotations

import dataclasses
import math

from kvscope.specs.model import ModelSpec

#: ``ServerArgs.mamba_full_memory_ratio`` default (0.5.6, 0.5.8.post1, 0.5.9, 0.5.14 wheels).
MAMBA_FULL_MEMORY_RATIO = 0.9
#: Releases whose wheels hold the ratio split above (checked: 0.5.6, 0.5.8.post1, 0.5.9, 0.5.14).
SINCE = (0, 5, 6)
UNTIL = (0, 5, 14)
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


def split(rest: float, per_req: int, ratio: float = MAMBA_FULL_MEMORY_RATIO) -> tuple[int, float]:
    """(``max_mamba_cache_size``, bytes left for the KV pool) from the pools' ``rest``."""
    if per_req <= 0 or rest <= 0:
        return 0, rest
    size = math.floor(rest * ratio / (1 + ratio) / per_req)
    return size, rest - size * per_req
