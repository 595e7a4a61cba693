"""SGLang's multimodal reservation out of the KV budget (0.5.18+), bytes.

Source: ``mm_runtime_reservation_gb`` (srt/mem_cache/kv_cache_configurator.py, the same
function in the 0.5.18-0.5.23 wheels; absent from 0.5.17), subtracted from ``rest_memory`` in
``KVCacheConfigurator._profile_available_bytes`` before the mamba split and the KV pool are
sized. For a model SGLang serves as multimodal (``ModelConfig.is_multimodal``) it reserves
``SGLANG_VLM_CACHE_SIZE_MB`` (100 MiB, srt/environ.py) for the embedding cache, plus
``SGLANG_MM_FEATURE_CACHE_MB`` (1024 MiB) when ``--mm-feature-transport`` is ``cuda_ipc`` or
``cuda_vmm``; the flag is unset by default and a single-node start transports features through
CPU memory, so the default reservation is the 100 MiB.
"""

from __future__ import annotations

#: First release that reserves the multimodal caches out of the KV budget.
SINCE = (0, 5, 18)
#: ``SGLANG_VLM_CACHE_SIZE_MB`` default (srt/environ.py, 0.5.18-0.5.23 wheels).
VLM_CACHE_MIB = 100


def reserved_bytes(version: tuple[int, ...], multimodal: bool) -> int:
    """Bytes ``version`` takes out of the pools' ``rest`` for a (non-)multimodal model."""
    if not multimodal or version[:3] < SINCE:
        return 0
    return VLM_CACHE_MIB << 20
