"""The receive buffer of a vLLM pipeline stage after the first, bytes on one GPU, and where the
engine's profiler counts it.

A stage that is not the first keeps one persistent ``IntermediateTensors`` sized for the
largest batch: ``model.make_empty_intermediate_tensors(batch_size=max_num_tokens)``, which for
the decoder families (``make_empty_intermediate_tensors_factory(["hidden_states", "residual"],
hidden_size)``, vllm/model_executor/models/utils.py with llama.py, qwen2.py, qwen3_moe.py,
deepseek_v2.py of 0.27.0) is two ``[max_num_batched_tokens, hidden]`` tensors in the model dtype.

- V1 runner (vllm/v1/worker/gpu_model_runner.py ``_dummy_run`` of the 0.22.0, 0.25.0, 0.27.0
  and 0.31.0 wheels) makes it on the first dummy run, i.e. inside the profiling pass, so the
  profiled peak holds it (before 0.27: ``torch_peak_increase``), and from 0.27.0 the consumed
  memory does.
- V2 runner (vllm/v1/worker/gpu/model_runner.py ``load_model``, same wheels) makes it after the
  weights are measured and before the pass: counted only from 0.27.0, where ``memory_profiling``
  subtracts everything consumed since the worker's snapshot (``total_consumed``,
  vllm/utils/mem_utils.py); up to 0.26 it is in none of the subtracted terms.

Not modelled (0 bytes): releases before 0.22.0 (not read), DeepSeek V4 (its own stage tensors).
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.plan.vllm_runner import runs_v2
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

READ_SINCE = (0, 22, 0)
#: ``total_consumed`` (vllm/utils/mem_utils.py of 0.27.0).
CONSUMED_SINCE = (0, 27, 0)


def intermediate_tensor_bytes(
    model: ModelSpec, eng: EngineConfig, gpu: GPUSpec, batched_tokens: int, first_stage: bool
) -> float:
    """Bytes of a later stage's ``IntermediateTensors`` that vLLM subtracts (the module text)."""
    v = eng.version
    if first_stage or v < READ_SINCE or model.is_deepseek_v4:
        return 0.0
    if runs_v2(model, eng, gpu) and v < CONSUMED_SINCE:
        return 0.0
    return float(2 * batched_tokens * model.hidden_size * element_bytes(model.dtype))
