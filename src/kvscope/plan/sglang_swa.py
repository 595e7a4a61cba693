"""SGLang's hybrid sliding-window KV pool (Gemma 4, gpt-oss, Llama 4): full and SWA tokens, bytes.

SGLang serves Gemma 4 (``Gemma4ForConditionalGeneration``, first in the 0.5.11 wheel: no
``models/gemma4*.py`` at 0.5.10) as a hybrid-SWA model (``is_hybrid_swa_model``), with two
token pools in one ``SWAKVPool``. Read in the 0.5.11, 0.5.13, 0.5.14 and 0.5.23 wheels:

- The config parser swaps Gemma 4's names (``utils/hf_transformers/config.py``): the base
  ``head_dim`` / ``num_key_value_heads`` become the full layers' (``global_head_dim`` and
  ``num_global_key_value_heads``) and ``swa_head_dim`` / ``swa_num_key_value_heads`` the
  sliding layers'. K and V both get a slot of ``head_dim`` (``v_head_dim = head_dim``), also
  with ``attention_k_eq_v``. At 0.5.11-0.5.14 the global KV heads apply wherever the key is
  present; 0.5.23 takes transformers' ``per_layer_config``, which (like vLLM and
  :mod:`kvscope.specs.config_gemma4`) applies them with ``attention_k_eq_v`` only. The public
  checkpoints agree under both (31B and 26B-A4B set both keys; E2B and E4B neither).
- ``get_hybrid_layer_ids`` splits layers by ``layer_types`` alone, so the last
  ``num_kv_shared_layers`` layers (which read an earlier layer's cache:
  ``RadixAttention(layer_id=kv_shared_layer_index)`` in ``models/gemma4_causal.py``) still
  get a buffer of their own in each pool: SGLang allocates them, vLLM does not.
- ``HybridSWAPoolConfigurator`` (``model_executor/pool_configurator.py``, the same class body
  at 0.5.11-0.5.14; 0.5.23 adds draft, mxfp8 and unified-memory terms kvscope does not use):
  ``F = max(1, kv // attn_tp) x 2 x head_dim x elt`` per full layer, ``S`` likewise per
  sliding layer, ``cell = F x n_full + r x S x n_swa`` with ``r = --swa-full-tokens-ratio``
  (0.8), ``max_total_num_tokens = full = floor(rest / cell)`` page-aligned and
  ``swa = int(full x r)`` page-aligned.
- Layer lists under PP: up to 0.5.14 ``ModelRunner.adjust_hybrid_swa_layers_for_pp`` keeps
  ``range(start_layer, end_layer + 1)``, the stage's layers plus the next stage's first (read
  in the 0.5.11, 0.5.13 and 0.5.14 wheels); at 0.5.23 ``layer_setup.
  _resolve_local_hybrid_swa_layer_ids`` keeps ``range(start_layer, end_layer)``. 0.5.15-0.5.22
  are not read, so PP there is refused.
- The default attention backend is ``triton`` at 0.5.11-0.5.12 and, from 0.5.13, ``trtllm_mha``
  on SM100 (``triton`` elsewhere), whose page size is forced to 64 (``server_args.py``:
  "TensorRT-LLM MHA only supports page_size of 16, 32 or 64").

gpt-oss (``GptOssForCausalLM``, layers split by ``layer_types``), read in the 0.5.3, 0.5.6,
0.5.8.post1 and 0.5.9-0.5.23 wheels:

- 0.5.3 and 0.5.6: the GPT-OSS branch of ``ServerArgs`` sets ``disable_hybrid_swa_memory``
  unconditionally, so one token pool holds every layer at full length (0.5.7 is not read and is
  planned the same way).
- 0.5.8.post1 and 0.5.9: ``is_hybrid_swa_model`` lists ``GptOssForCausalLM``, but ``ServerArgs``
  disables the hybrid pool when prefill or decode runs ``trtllm_mha`` (gpt-oss's default on
  SM100: "TODO: support swa kv indices translation"), and at 0.5.8.post1 also with speculative
  decoding. ``set_num_tokens_hybrid_swa`` first sizes ``max_total_num_tokens`` by the one-pool
  cell, then rescales: ``full = int(tokens x (F nf + S ns) / (F nf + r S ns))``.
- 0.5.10-0.5.23: no switch turns it off (``arg_groups/model_overrides/gpt_oss.py`` at 0.5.19+
  sets only backends, dtype and MoE runner); from 0.5.11 the ``HybridSWAPoolConfigurator`` above
  divides by the two-pool cell directly. ``trtllm_mha`` forces page 64 on SM100 at every release.
  0.5.23's ``validate_swa_pool_size`` floor applies as for Gemma 4 (``gpt_oss.py``:
  ``sliding_window - 1`` = 127).
- Gemma 2 / Gemma 3 / Gemma 3n keep one pool at every release read (``disable_hybrid_swa_memory``
  in ``ServerArgs``, from 0.5.15 the ``_gemma2_gemma3_overrides`` registry); they stay at full
  length.

Llama 4 (layers planned as full attention, as vLLM runs them), read in the 0.5.3, 0.5.6,
0.5.8.post1 and 0.5.9-0.5.23 wheels:

- 0.5.3 and 0.5.6: ``is_hybrid_model`` makes Llama 4 hybrid only with ``--hybrid-kvcache-ratio``
  (default None): one pool (0.5.7 is not read and is planned the same way).
- 0.5.8.post1-0.5.23: ``is_hybrid_swa_model`` lists ``Llama4ForConditionalGeneration`` (not
  ``Llama4ForCausalLM``), and ``get_hybrid_layer_ids`` puts layer i in the SWA pool when
  ``(i + 1) % 4 != 0`` (Scout and Maverick: 36 SWA, 12 full). No ``ServerArgs`` branch or (from
  0.5.15) ``arg_groups/model_overrides/llama4.py`` sets ``disable_hybrid_swa_memory``; they pick
  the backend only (``fa3`` SM90, ``trtllm_mha`` SM100, ``triton`` elsewhere). The SWA pool is
  ``int(full x --swa-full-tokens-ratio)``, as for gpt-oss, not the chunk; ``sliding_window_size``
  is ``attention_chunk_size`` (8192), which only 0.5.23's ``validate_swa_pool_size`` floor reads.
  kvscope tells the wrapper from the text-only class by its vision tower.
- Both Llama 4 classes default to ``trtllm_mha`` on SM100 from 0.5.6 (0.5.3 asserts ``fa3``,
  ``aiter`` or ``triton``; 0.5.4-0.5.5 unread, planned as before), so the page is 64 there.

gpt-oss is kept on the one-pool count (today's plan) with speculative decoding and with pipeline
parallelism (the draft's pools and the per-stage layer lists are not modelled for it).

Not modelled (refused or left out): speculative decoding (the 0.5.23 configurator adds the
draft's layers), ``--disable-hybrid-swa-memory``, and the request-cap SWA pool
(``SWAChunkCapPoolConfigurator``, only with ``--max-running-requests`` and
``--disable-radix-cache``). Units: bytes, tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.vllm_chunked import is_rope_layer
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

MODEL_TYPE = "gemma4_text"
GPT_OSS = "gpt_oss"
LLAMA4 = "llama4_text"
#: First release read that runs Llama 4 with two pools (0.5.6 only with --hybrid-kvcache-ratio).
LLAMA4_TWO_POOLS_SINCE = (0, 5, 8)
#: First release read whose Llama 4 branch picks ``trtllm_mha`` on SM100.
LLAMA4_TRTLLM_SINCE = (0, 5, 6)
#: First release read that runs gpt-oss with two pools (0.5.6 disables them; 0.5.7 unread).
GPT_OSS_TWO_POOLS_SINCE = (0, 5, 8)
#: Last release that turns gpt-oss's two pools off under ``trtllm_mha`` (SM100's default).
GPT_OSS_TRTLLM_ONE_POOL_UNTIL = (0, 5, 9)
#: First release whose ``HybridSWAPoolConfigurator`` divides by the two-pool cell directly
#: (before, ``set_num_tokens_hybrid_swa`` rescales the one-pool token count).
CONFIGURATOR_SINCE = (0, 5, 11)
#: First SGLang release with Gemma 4 (``srt/models/gemma4_causal.py``): absent at 0.5.10.
FIRST_GEMMA4 = (0, 5, 11)
#: First release read whose SWA pools hold exactly the PP stage's layers.
STAGE_LAYERS_SINCE = (0, 5, 23)
#: Last release read whose SWA pools also hold the next stage's first layer.
STAGE_PLUS_ONE_UNTIL = (0, 5, 14)
#: First release read that refuses an SWA pool of at most ``sliding_window_size + page_size``
#: tokens (``HybridSWAPoolConfigurator.validate_swa_pool_size``: absent at 0.5.14, present at
#: 0.5.23), ``sliding_window_size`` being the model's ``sliding_window - 1``.
SWA_FLOOR_SINCE = (0, 5, 23)
#: ``--swa-full-tokens-ratio`` default (``ServerArgs``; the 0.5.23 fallback).
SWA_FULL_TOKENS_RATIO = 0.8
#: Page size SGLang forces for ``trtllm_mha``, Gemma 4's default backend on SM100 ...
TRTLLM_MHA_PAGE = 64
#: ... from this release (0.5.11 and 0.5.12 default to ``triton`` on every GPU).
TRTLLM_MHA_SINCE = (0, 5, 13)


@dataclass(frozen=True)
class SwaCell:
    """Per-token bytes of each pool on one GPU and the layers each holds."""

    full_per_layer: float
    swa_per_layer: float
    full_layers: int
    swa_layers: int
    ratio: float = SWA_FULL_TOKENS_RATIO

    @property
    def cell_bytes(self) -> float:
        """Bytes per token of ``max_total_num_tokens`` (full pool plus its SWA share)."""
        return self.full_per_layer * self.full_layers + (
            self.ratio * self.swa_per_layer * self.swa_layers
        )

    def split(self, rest: float, page_size: int) -> tuple[int, int]:
        """(full, swa) pool tokens out of ``rest`` bytes, as ``_solve_pool_sizes`` aligns them."""
        full = max(0, math.floor(rest / self.cell_bytes)) // page_size * page_size
        return full, int(full * self.ratio) // page_size * page_size


def is_gemma4(model: ModelSpec) -> bool:
    """Whether ``model`` is planned with SGLang's Gemma 4 pool."""
    return model.model_type == MODEL_TYPE


def is_llama4_hybrid(model: ModelSpec) -> bool:
    """Whether ``model`` is a ``Llama4ForConditionalGeneration`` (the vision wrapper), whose
    chunked-attention layers SGLang 0.5.8+ keeps in an SWA pool (``Llama4ForCausalLM`` is not)."""
    return model.model_type == LLAMA4 and model.vision_params > 0


def _swa_layer(model: ModelSpec, i: int) -> bool:
    if is_llama4_hybrid(model):
        return is_rope_layer(i)  # get_hybrid_layer_ids
    return model.layers[i].attention.kind == "sliding"


def _sm100(compute_capability: str) -> bool:
    return compute_capability.split(".")[0] == "10"


def two_pools(
    model: ModelSpec, eng: EngineConfig, par: Parallelism, compute_capability: str
) -> bool:
    """Whether SGLang (as planned) keeps ``model``'s sliding layers in their own SWA pool."""
    if is_gemma4(model):
        return True
    llama4 = is_llama4_hybrid(model) and eng.version >= LLAMA4_TWO_POOLS_SINCE
    if not llama4 and (model.model_type != GPT_OSS or eng.version < GPT_OSS_TWO_POOLS_SINCE):
        return False
    if eng.speculative is not None or eng.speculative_layers or par.pp > 1:
        return False  # kept on the one-pool count (module text)
    if llama4:
        return True  # no release read turns it off
    trtllm = _sm100(compute_capability)  # gpt-oss's default backend there
    return not (trtllm and eng.version <= GPT_OSS_TRTLLM_ONE_POOL_UNTIL)


def pool_tokens(rest: float, cell: SwaCell, one_pool_cell: float, version: tuple[int, ...]) -> int:
    """``max_total_num_tokens`` before page alignment: before 0.5.11 the one-pool count rescaled
    (``set_num_tokens_hybrid_swa``), from 0.5.11 ``rest`` over the two-pool cell."""
    if version >= CONFIGURATOR_SINCE or not one_pool_cell:
        return max(0, math.floor(rest / cell.cell_bytes))
    profiled = max(0, math.floor(rest / one_pool_cell))
    full = profiled * (
        cell.full_per_layer * cell.full_layers + cell.swa_per_layer * cell.swa_layers
    )
    return int(full / cell.cell_bytes)


def check_gemma4(model: ModelSpec, eng: EngineConfig, par: Parallelism) -> None:
    """Refuse in one line the Gemma 4 launches this model does not cover (see the module text);
    other models pass."""
    if not is_gemma4(model):
        return
    if eng.version < FIRST_GEMMA4:
        raise KvscopeError(
            f"SGLang {eng.version_text} has no Gemma 4 ({model.name}): its first release with "
            "Gemma 4 is 0.5.11.",
            "Plan it with --engine-version 0.5.11 or newer, or --engine vllm.",
        )
    if eng.speculative is not None or eng.speculative_layers:
        raise KvscopeError(
            f"SGLang's Gemma 4 pool with speculative decoding ({model.name}) is not modelled.",
            "Plan it without speculative decoding, or with --engine vllm.",
        )
    if par.pp > 1 and STAGE_PLUS_ONE_UNTIL < eng.version < STAGE_LAYERS_SINCE:
        raise KvscopeError(
            f"SGLang {eng.version_text}'s Gemma 4 pools under pipeline parallelism are not "
            "modelled (read at 0.5.11-0.5.14 and 0.5.23 only).",
            "Plan it with --engine-version 0.5.14 or 0.5.23, or without PP.",
        )


def swa_cell(
    model: ModelSpec, layers: tuple[int, ...], kv_dtype: str, attn_tp: int, version: tuple[int, ...]
) -> SwaCell:
    """The pools' per-token bytes for a PP stage owning ``layers`` (KV-shared layers included)."""
    held = layers
    if version <= STAGE_PLUS_ONE_UNTIL and layers and layers[-1] + 1 < model.num_layers:
        held = (*layers, layers[-1] + 1)  # ``range(start_layer, end_layer + 1)``
    elt = element_bytes(kv_dtype)
    full = [model.layers[i].attention for i in held if not _swa_layer(model, i)]
    swa = [model.layers[i].attention for i in held if _swa_layer(model, i)]

    def per_layer(att: list[AttentionLayer]) -> float:
        if not att:
            return 0.0
        a = att[0]
        return float(max(1, a.num_kv_heads // attn_tp) * 2 * a.head_dim * elt)

    return SwaCell(per_layer(full), per_layer(swa), len(full), len(swa))


def swa_floor_problem(
    model: ModelSpec,
    full_tokens: int,
    page: int,
    eng: EngineConfig,
    par: Parallelism,
    compute_capability: str,
) -> str | None:
    """Why SGLang refuses to start when the SWA pool cannot admit one request, else None
    (only where the sliding layers are planned in their own pool, :func:`two_pools`)."""
    pooled = two_pools(model, eng, par, compute_capability)
    if not pooled or eng.version < SWA_FLOOR_SINCE or full_tokens <= 0:
        return None
    windows = [x.attention.window for x in model.layers if x.attention.kind == "sliding"]
    if is_llama4_hybrid(model) and model.attention_chunk_size:
        window = model.attention_chunk_size  # resolve_sliding_window_size's chunk fallback
    elif not windows or windows[0] is None:
        return None
    else:
        # get_attention_sliding_window_size: HF's inclusive window - 1 (gemma4_causal.py and
        # gpt_oss.py at 0.5.23)
        window = windows[0] - 1
    swa = int(full_tokens * SWA_FULL_TOKENS_RATIO) // page * page
    if window + page < swa:
        return None
    return (
        f"the SWA pool ({swa:,} tokens) cannot hold one request: SGLang needs more than "
        f"sliding_window_size + page_size ({window} + {page}) tokens."
    )


def page_size(compute_capability: str, version: tuple[int, ...]) -> int:
    """Gemma 4's SGLang page size: 64 under ``trtllm_mha`` (SM100, 0.5.13+), else 1."""
    return TRTLLM_MHA_PAGE if _sm100(compute_capability) and version >= TRTLLM_MHA_SINCE else 1


def gpt_oss_page_size(compute_capability: str) -> int:
    """gpt-oss's SGLang page size: 64 on SM100 (``trtllm_mha`` by default at every release
    read, 0.5.3-0.5.23), else 1."""
    return TRTLLM_MHA_PAGE if _sm100(compute_capability) else 1


def llama4_page_size(compute_capability: str, version: tuple[int, ...]) -> int:
    """Llama 4's SGLang page size: 64 under ``trtllm_mha`` (SM100, 0.5.6+), else 1."""
    trtllm = _sm100(compute_capability) and version >= LLAMA4_TRTLLM_SINCE
    return TRTLLM_MHA_PAGE if trtllm else 1
