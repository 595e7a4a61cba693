"""bitsandbytes double quantization as vLLM keeps it, by release (weights side).

A 4-bit bitsandbytes checkpoint saved with ``bnb_4bit_use_double_quant`` stores each
64-weight block's absmax as an 8-bit value, with a second-level fp32 absmax per 256 of those
(bitsandbytes ``QuantState`` with ``nested=True``: ``absmax`` uint8, ``state2.absmax`` fp32,
``offset``). kvscope's spec counts the form an engine dequantizes to, an fp32 absmax per 64
weights (0.5 + 4/64 bytes a weight, :func:`kvscope.specs.quant.parse_quantization`), which
vLLM does from 0.10.0: ``BitsAndBytesModelLoader._dequantize_dq`` ("When BNB employs Double
Quantization, we perform the dequantization of these constants during weight loading"),
present in vllm/model_executor/model_loader/bitsandbytes_loader.py of the 0.10.0 and 0.11.0
wheels and absent from the 0.9.0 and 0.9.2 ones. Before, ``_quantized_4bit_generator``
(vllm/model_executor/model_loader/loader.py of 0.8.5.post1) rebuilds each state with
``QuantState.from_dict`` and keeps it nested on the GPU: 0.5 + 1/64 + 4/(64 x 256) bytes a
weight. unsloth/mistral-7b-instruct-v0.3-bnb-4bit under 0.8.5.post1 logs 4.0423 GiB with a
rank-32 LoRA slot: 4.03 planned with the nested form, 4.33 with the fp32 one.
"""

from __future__ import annotations

from dataclasses import replace

from kvscope.plan.config import EngineConfig
from kvscope.specs.model import ModelSpec

#: First vLLM release that dequantizes double-quantized absmax at load.
DEQUANTIZED_SINCE = (0, 10, 0)
NESTED_4BIT_BYTES = 0.5 + 1.0 / 64 + 4.0 / (64 * 256)


def with_vllm_bnb_statistics(model: ModelSpec, eng: EngineConfig) -> ModelSpec:
    """``model`` with its bitsandbytes linears at the bytes vLLM ``eng.version`` holds."""
    q = model.quantization
    if eng.engine != "vllm" or not q.double_quant or eng.version >= DEQUANTIZED_SINCE:
        return model
    nested = replace(q, linear_bytes=NESTED_4BIT_BYTES, expert_bytes=NESTED_4BIT_BYTES)
    return replace(model, quantization=nested)
