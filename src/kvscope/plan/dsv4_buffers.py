"""Buffers DeepSeek V4's (and V3.2's) vLLM model allocates at load, sized by
``max_num_batched_tokens`` and counted inside "Model loading took": the indexers' shared top-k
index buffer, the MTP / DSpark drafter's copy of the pre-``hc_head`` residual streams, and a
DSpark drafter's own top-k buffer, by release (sources in :func:`dsv4_buffer_bytes`). Units:
bytes on one GPU."""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: DeepSeek V4's pre-``hc_head`` residual buffer for the MTP drafter is allocated whatever
#: the flags up to 0.26 and only with EAGLE-type or draft-model speculation from 0.27.0
#: (``DeepseekV4Model.__init__``, ``needs_mtp_hidden_states``, vllm/models/deepseek_v4/
#: nvidia/model.py of the 0.26.0 and 0.27.0 wheels).
DSV4_MTP_BUFFER_ONLY_WITH_SPEC_SINCE = (0, 27, 0)

#: First release whose DSpark drafter allocates its own top-k index buffer
#: (``vllm/models/deepseek_v4/nvidia/dspark.py``: absent at 0.25.0 and 0.26.0, present at
#: 0.27.0-0.31.0).
DSPARK_TOPK_BUFFER_SINCE = (0, 27, 0)


def dsv4_buffer_bytes(
    model: ModelSpec, eng: EngineConfig, batched_tokens: int, last_stage: bool
) -> float:
    """Buffers DeepSeek V4's (and V3.2's) model allocates at load, sized by
    ``max_num_batched_tokens``.

    ``DeepseekV4Model.__init__`` (vllm/models/deepseek_v4/nvidia/model.py, 0.22.0-0.31.0)
    reserves the indexers' shared top-k index buffer (T x ``index_topk`` int32) and, on the
    last pipeline stage, the drafter's copy of the pre-``hc_head`` residual streams
    (T x ``hc_mult`` x hidden, model dtype; from 0.27.0 only when ``use_eagle()`` or a draft
    model, DSpark included); both fall inside "Model loading took". A DSpark drafter adds its
    own top-k index buffer.
    """
    if not model.hc_mult:
        # DeepSeek V3.2 (a config with ``index_topk``): ``DeepseekV2Model.__init__`` keeps the
        # same T x index_topk int32 buffer (vllm/model_executor/models/deepseek_v2.py in the
        # 0.11.1, 0.13.0 and 0.20.0 wheels; vllm/models/deepseek_v32/nvidia/model.py in 0.25.0)
        return batched_tokens * model.index_topk * 4.0
    buffers = batched_tokens * model.index_topk * 4.0
    spec = eng.speculative
    # SpeculativeConfig.use_eagle() (mtp, eagle, eagle3, dflash, dspark) or a draft model
    drafts = spec is not None and spec.method in (
        "mtp",
        "eagle",
        "eagle3",
        "draft_model",
        "dspark",
    )
    dspark = spec is not None and spec.method == "dspark"
    if last_stage and dspark and eng.version >= DSPARK_TOPK_BUFFER_SINCE:
        # DSparkDeepseekV4Model keeps its own top-k index buffer (T x index_topk int32)
        buffers += batched_tokens * model.index_topk * 4.0
    if eng.speculative_layers:
        drafts = True
    if last_stage and (eng.version < DSV4_MTP_BUFFER_ONLY_WITH_SPEC_SINCE or drafts):
        b = element_bytes(model.dtype)
        buffers += batched_tokens * model.hc_mult * model.hidden_size * b
    return buffers
