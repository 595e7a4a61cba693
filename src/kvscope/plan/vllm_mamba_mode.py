"""vLLM's effective ``--mamba-cache-mode`` for attention + linear-attention hybrids, by release.

How many state blocks a hybrid request holds per linear group (one in ``none``, two in
``align``; :mod:`kvscope.plan.kv_layout`) follows the mode vLLM ends up with, not only the flag:

- ``MambaModelConfig.verify_and_update_config`` (vllm/model_executor/models/config.py, 0.22.0
  to 0.34.0 wheels) turns ``none`` into ``align`` whenever prefix caching is on, and logs
  "Mamba cache mode is set to 'align' for ... by default when prefix caching is enabled".
- Whether prefix caching is on when not asked for is ``EngineArgs.
  _set_default_chunked_prefill_and_prefix_caching_args`` (vllm/engine/arg_utils.py): up to
  0.26 ``ModelConfig.is_prefix_caching_supported`` is ``False`` for generative hybrids ("still
  experimental"), 0.27.0 keeps it opt-in (``... and not model_config.is_hybrid``), and from
  0.28 (the 0.30.0, 0.31.0 and 0.34.0 wheels; a 0.28.0 start-up log prints the line above with
  ``enable_prefix_caching=True``) hybrids default to it, so a plain start runs ``align``.

The planner's ``EngineConfig.enable_prefix_caching`` defaults to ``True`` (vLLM's default for
attention models), so from 0.28 a hybrid left at ``none`` plans as ``align``; before 0.28 the
mode is what the user gave, as the release's default start has prefix caching off.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig

#: First vLLM release that enables prefix caching by default for generative hybrid models.
HYBRID_PREFIX_CACHING_SINCE = (0, 28, 0)


def effective_mamba_cache_mode(eng: EngineConfig) -> str:
    """The ``--mamba-cache-mode`` vLLM runs for ``eng`` (``none``, ``align`` or ``all``)."""
    if (
        eng.mamba_cache_mode == "none"
        and eng.enable_prefix_caching
        and eng.version >= HYBRID_PREFIX_CACHING_SINCE
    ):
        return "align"
    return eng.mamba_cache_mode
