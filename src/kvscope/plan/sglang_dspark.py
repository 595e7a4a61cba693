"""SGLang's DSpark drafting (``--speculative-algorithm DSPARK``) on DeepSeek V4, bytes on one GPU.

Read in the sglang 0.5.15-0.5.23 wheels (``sglang/srt/...``):

- DSPARK first appears in 0.5.16 (absent from 0.5.15's ``server_args.py`` and
  ``speculative/``). ``arg_groups/speculative_hook.py::_handle_dspark`` (0.5.16) refuses
  ``pp_size != 1``, takes a checkpoint that bundles the stages (``dspark_*`` keys,
  ``checkpoint_bundles_dspark_draft``) as its own draft, forces one step and top-k 1 and sets
  ``speculative_num_draft_tokens = gamma + 1`` (gamma: ``--speculative-dspark-block-size``,
  else the checkpoint's ``dspark_block_size``, else 7). Its "reset to 48" of
  ``max_running_requests`` never fires on V4: ``apply_deepseek_v4_defaults`` (run earlier, in
  ``_handle_model_specific_adjustments``) has set 256.
- Draft weights: ``DeepseekV4ForCausalLMDSpark`` (``models/deepseek_v4_dspark.py``) builds
  ``len(dspark_target_layer_ids)`` stages, each a target-shaped ``DeepseekV4DecoderLayer``
  (SWA-only attention: ``DSparkAttention`` asserts ``compress_ratio == 0`` and builds no
  compressor or indexer, which only ``MQALayer`` of ``models/deepseek_v4.py`` does, so a stage
  is priced as :func:`kvscope.plan.weights.window_only_attention` of the last layer; the
  target's MoE), stage 0 adding ``main_proj`` (``ReplicatedLinear``
  h x stages*h -> h, the checkpoint's linear precision); the Markov head's ``markov_w1``
  (vocab x rank) and ``markov_w2`` (rank -> vocab, bf16 by default:
  ``SGLANG_DSPARK_OPT_MARKOV_W2_BF16``), whole on every rank. Embedding and LM head are the
  target's (``attach_shared_modules``). Unlike vLLM there is no ``context_wkv_proj``: each
  stage's own ``wkv`` writes the context KV (``write_target_hidden_kv``). The confidence head
  (one fp32 row of h + rank) is left out.
- Order: ``Scheduler.init_model_worker`` loads the target, then the draft worker
  (``maybe_init_draft_worker``), then sizes the pools (``init_memory_pools``), so the draft's
  weights come out of ``mem_fraction_static``'s share ("draft weights are now counted",
  ``mem_cache/kv_cache_configurator.py::_profile_available_bytes``).
- Pool: ``DSV4PoolConfigurator`` (``model_executor/pool_configurator.py``) treats any
  algorithm alike: ``is_speculative`` widens the compressor rings to 16 / 256 rows and inflates
  bytes per full token by (T + 1) / T, one draft layer whatever the stage count
  (:func:`kvscope.plan.sglang_budget.dsv4_bytes_per_full_token`). The draft's own SWA pool is
  allocated after sizing, from the memory left. The DSpark-only terms of 0.5.21-0.5.23 (a bf16
  draft ring beside a unified fp8 pool, the encoder replay window) are opt-in and ROCm- or
  flag-gated, so a default CUDA start does not take them.

DeepSeek V4.1 (SGLang 0.5.21+) and DSpark drafters of other models (their own draft checkpoint,
``scale_kv_cell_size_per_token_for_dflash``) are not modelled.
"""

from __future__ import annotations

from dataclasses import replace

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.drafter import Drafter, dspark_context_wkv_bytes
from kvscope.specs.model import ModelSpec

#: First SGLang release with ``--speculative-algorithm DSPARK`` (see the module text).
SINCE = (0, 5, 16)


def sglang_drafter(
    model: ModelSpec, par: Parallelism, eng: EngineConfig, drafter: Drafter
) -> Drafter:
    """``drafter`` (vLLM's rules, :mod:`kvscope.plan.drafter`) as SGLang loads a DSpark one;
    other methods pass through. Raises one line where SGLang has or kvscope models no DSpark."""
    if drafter.method != "dspark":
        return drafter
    if eng.version < SINCE:
        raise KvscopeError(
            f"SGLang {eng.version_text} has no DSpark drafting (--speculative-algorithm "
            "DSPARK arrived in 0.5.16)."
        )
    if not model.is_deepseek_v4 or model.model_type.startswith("deepseek_v41"):
        raise KvscopeError(
            f"SGLang's DSpark drafting is modelled for DeepSeek V4 checkpoints that ship "
            f"DSpark stages (V4-Flash-0731), not for {model.name}."
        )
    if par.pp > 1:
        raise KvscopeError(
            "SGLang's DSpark drafting needs --pipeline-parallel-size 1 (as _handle_dspark)."
        )
    stages = model.dspark_target_layers or drafter.mtp_layers
    return replace(
        drafter,
        mtp_layers=stages,
        kv_layers=stages,
        # SGLang builds no context_wkv_proj (each stage's own wkv writes the context KV)
        extra_weight_bytes=drafter.extra_weight_bytes - dspark_context_wkv_bytes(model),
        note="SGLang's DSpark stages: one draft layer priced in the V4 pool (0.5.16+)",
    )
