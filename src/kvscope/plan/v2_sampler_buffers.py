"""The persistent per-request buffers of vLLM's V2-runner sampler that the KV budget pays for,
bytes on one GPU of the last pipeline stage.

``GPUModelRunner.load_model`` (vllm/v1/worker/gpu/model_runner.py, V2 runner) builds a
``Sampler`` and a ``StructuredOutputsWorker`` on the last pipeline stage after the weights are
loaded ("Model loading took" does not hold them). They keep, for ``max_num_seqs`` = R rows
(vllm/v1/worker/gpu/sample/{penalties,logit_bias,bad_words,logprob}.py and structured_outputs.py,
read in the 0.27.0, 0.30.0, 0.31.0 and 0.34.0 wheels), int32 / float32 on the device:

- ``PenaltiesState``: ``output_bin_counts`` R x vocab and ``prompt_bin_mask`` R x cdiv(vocab, 32)
  ("This tensor is rarely used but can be very large, taking up GBs of GPU memory");
- ``LogitBiasState``: R x 1,024 allowed ids, R x 1,024 bias ids, R x 1,024 biases, R x 128 stop
  ids; ``BadWordsState``: R x 1,024 tokens and R x 129 offsets; ``LogprobTokenIdsState``:
  R x 128 (``MAX_LOGPROB_TOKEN_IDS``, vllm/sampling_params.py);
- ``StructuredOutputsWorker``: a grammar bitmask of R x (1 + speculative tokens) rows of
  cdiv(vocab, 32) and their indices.

The vocabulary is ``ModelConfig.get_vocab_size()``, config.json's ``vocab_size``. From 0.27.0
``memory_profiling`` subtracts everything allocated since the worker's first snapshot
(``total_consumed``, vllm/utils/mem_utils.py of 0.27.0), so these buffers leave the KV pool;
up to 0.26 only the weights, the non-torch growth and the profiling pass's own peak are
subtracted (vllm/utils/mem_utils.py of 0.25.0), and a buffer made before the pass is in none of
them. The V1 runner has no such tables (its penalties work from token lists). Pooling models
build no sampler; they are not planned here.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.plan.vllm_runner import runs_v2
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: First wheel whose profiling subtracts allocations made before the pass (``total_consumed``).
COUNTED_SINCE = (0, 27, 0)
#: int32 / float32 columns a request keeps whatever the vocabulary: logit bias (1,024 allowed
#: ids, 1,024 bias ids, 1,024 biases, 128 stop ids), bad words (1,024 tokens, 129 offsets),
#: logprob token ids (128).
FIXED_COLUMNS = 3 * 1024 + 128 + 1024 + 129 + 128


def v2_sampler_bytes(model: ModelSpec, eng: EngineConfig, gpu: GPUSpec, max_num_seqs: int) -> float:
    """Bytes of the V2 sampler's tables that vLLM at ``eng``'s release takes from the KV pool
    on the last stage (0 where they are not counted or not built; the module text)."""
    if eng.version < COUNTED_SINCE or not runs_v2(model, eng, gpu):
        return 0.0
    vocab = model.vocab_size
    words = -(-vocab // 32)
    spec = eng.speculative
    logits_rows = max_num_seqs * (1 + (spec.num_speculative_tokens if spec is not None else 0))
    per_row = vocab + words + FIXED_COLUMNS
    return float(4 * (max_num_seqs * per_row + logits_rows * (words + 1)))
