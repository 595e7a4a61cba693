"""The persistent buffers of vLLM's V2-runner DSpark speculator, bytes on one GPU.

``DSparkSpeculator.__init__`` (vllm/v1/worker/gpu/spec_decode/dspark/speculator.py, read in
the 0.25.0, 0.27.0, 0.30.0 and 0.31.0 wheels) keeps the drafter's copy of the combined target
hidden states, ``max_num_batched_tokens`` x the draft hidden size in the model dtype (it
replaces the DFlash base class's buffer of the same shape, which is freed). With
``draft_sample_method`` "probabilistic" the speculator base class
(vllm/v1/worker/gpu/spec_decode/speculator.py) also caches the proposal distribution,
``max_num_seqs`` x ``num_speculative_tokens`` x the draft vocabulary: float32 in 0.25.0 and
0.27.0, the head dtype (``draft_logits_spec``: the model dtype for a generation model,
``_get_head_dtype`` in vllm/config/model.py) in 0.30.0 and 0.31.0. 0.28 and 0.29 are not
read and keep float32.

The V2 runner builds the speculator in its ``__init__``, before ``load_model``, so neither
buffer falls inside "Model loading took". From 0.27.0 ``memory_profiling``
(vllm/utils/mem_utils.py) counts every allocation since the worker's first snapshot
(``total_consumed``), these buffers included; 0.25.0 adds only the weights, the non-torch
growth and the profiling pass's own peak, so there they are not taken from the KV pool (0.26
is not read and is treated as 0.25). Sources of sizes: the engine files above; the draft
vocabulary and hidden size of DeepSeek V4's DSpark stages are the target's.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: First wheel whose ``memory_profiling`` subtracts allocations made before the profiling
#: pass (``total_consumed``, vllm/utils/mem_utils.py of 0.27.0; absent in 0.25.0).
COUNTED_SINCE = (0, 27, 0)
#: First wheel read whose cached draft logits take the head dtype (``draft_logits_spec``,
#: 0.30.0; float32 in 0.27.0).
HEAD_DTYPE_LOGITS_SINCE = (0, 30, 0)


def dspark_speculator_bytes(
    model: ModelSpec, eng: EngineConfig, max_num_seqs: int, batched_tokens: int
) -> float:
    """Bytes the DSpark speculator's buffers take from the KV pool on the last stage."""
    spec = eng.speculative
    if spec is None or spec.method != "dspark" or eng.version < COUNTED_SINCE:
        return 0.0
    b = element_bytes(model.dtype)
    total = batched_tokens * model.hidden_size * b
    if spec.raw_dict().get("draft_sample_method", "greedy") == "probabilistic":
        logit_bytes = b if eng.version >= HEAD_DTYPE_LOGITS_SINCE else 4.0
        total += max_num_seqs * spec.num_speculative_tokens * model.vocab_size * logit_bytes
    return float(total)
