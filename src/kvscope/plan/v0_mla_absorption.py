"""The pre-multiplied MLA matrices vLLM 0.7.1-0.7.3 kept for decode, bytes per GPU.

vLLM's first MLA backends (``MLACommonImpl.process_weights_after_loading``,
vllm/attention/backends/mla/utils.py of the 0.7.1, 0.7.2 and 0.7.3 wheels) ran decode with
matrix absorption on by default (``VLLM_MLA_PERFORM_MATRIX_ABSORPTION=1``, vllm/envs.py):
after loading they build, per MLA layer and rank, beside the checkpoint's own ``q_b_proj``,
``kv_b_proj`` and ``o_proj`` (which stay for prefill):

- ``W_Q_UK``: ``W_UQ`` (the query up-projection's no-rope part) times ``W_UK``, shape
  ``q_lora_rank x (local heads x kv_lora_rank)`` (``hidden_size`` rows without a query LoRA);
- ``W_UV_O``: ``W_UV`` times ``o_proj``, shape ``(local heads x kv_lora_rank) x hidden_size``;
- ``W_QR``: the query up-projection's rope part, ``q_lora_rank x (local heads x rope dim)``,
  always in the activation dtype ("W_QR is small so for simplicity we dont bother
  requantizing it").

``W_Q_UK`` and ``W_UV_O`` are requantized to fp8 with the checkpoint's own group shape when its
weights are fp8 (``VLLM_MLA_DISABLE_REQUANTIZATION=0``, the default) and kept in the activation
dtype otherwise (AWQ / GPTQ checkpoints, which 0.7.3 first runs as MLA; 0.7.1 and 0.7.2 turned
MLA off for quantization other than fp8 and compressed-tensors fp8, ``ModelConfig.use_mla``).
The dequantized ``kv_b_proj`` copy (``W_UK`` / ``W_UV``) is counted by
:func:`kvscope.plan.weights.mla_absorbed_bytes`. 0.8.0 dropped the absorption
(vllm/attention/backends/mla/common.py), so these matrices exist in 0.7.1-0.7.3 only, and
vLLM counts them in its "model weights take" figure (the load is profiled after
``process_weights_after_loading``).
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: first release with the MLA backends, and the release that dropped matrix absorption
ABSORPTION_SINCE = (0, 7, 1)
ABSORPTION_BEFORE = (0, 8, 0)
#: first release running MLA for any quantization (0.7.1/0.7.2: none, fp8, compressed-tensors)
MLA_ANY_QUANT_SINCE = (0, 7, 3)


def v0_absorbed_bytes(
    model: ModelSpec, par: Parallelism, layers: tuple[int, ...], eng: EngineConfig
) -> float:
    """Bytes of ``W_Q_UK``, ``W_UV_O`` and ``W_QR`` one GPU builds for ``layers`` (module text)."""
    if eng.engine != "vllm" or not ABSORPTION_SINCE <= eng.version < ABSORPTION_BEFORE:
        return 0.0
    quant = model.quantization
    if eng.version < MLA_ANY_QUANT_SINCE and quant.method not in (
        "none",
        "fp8",
        "compressed-tensors",
    ):
        return 0.0
    act = element_bytes(model.dtype)
    linear = quant.component_bytes(act)["attention"]
    absorbed = 1.0 if 1.0 <= linear < 1.01 else act  # fp8 weights are requantized to fp8
    total = 0.0
    for i in layers:
        att = model.layers[i].attention
        if att.kind != "mla":
            continue
        heads = att.num_heads // par.attn_tp
        q_in = att.q_lora_rank or att.hidden_size
        latent = heads * att.kv_lora_rank
        total += (q_in * latent + latent * att.hidden_size) * absorbed
        total += q_in * heads * att.qk_rope_head_dim * act
    return total
