"""Peak activation memory of the engine's profiling forward pass, and the other non-KV terms.

vLLM sizes the KV cache after a dummy forward pass of ``max_num_batched_tokens`` tokens
(``GPUModelRunner.profile_run``) followed by a sampler pass over ``max_num_seqs`` rows; the
rise of torch's peak allocated bytes during it is the "activation peak" it subtracts
(``vllm/utils/mem_utils.py::memory_profiling``). Intermediate tensors of one layer are freed
before the next layer starts, so the peak is that of the widest layer, not a sum over layers.

Terms (per GPU, T = tokens of the pass, b = activation bytes = model dtype, tp = TP size):

- ``residual``: the hidden state and the residual stream, ``2 T h b``.
- ``attention``: the fused QKV projection output plus the attention output,
  ``T (q_heads + 2 kv_heads) d b / tp``-style; for MLA the up-projected per-head Q/K/V of the
  prefill path, ``T nh/tp (2 qk + v) b``.
- ``mlp``: gate+up output (``2 T I/tp b``) live together with the activated half
  (``T I/tp b``).
- ``moe``: the fused-MoE workspaces for every routed copy of a token
  (``T k (2 I_e + I_e + h) b``; I_e divided by tp without EP), chunked by vLLM at
  ``VLLM_FUSED_MOE_CHUNK_SIZE`` = 32768 tokens (``vllm/envs.py``), plus fp32 router logits.
- ``sampler``: logits of the sampler pass, ``S V`` in the model dtype, then an fp32 copy and
  fp32 probabilities (``S V (b + 8)``), S = ``min(max_num_seqs, T)``.

The estimate is the larger of the layer peak and the sampler peak. It is an upper-bound-style
model: kernels that fuse steps (FlashAttention, fused SiLU) can lower the true figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.plan.config import Parallelism
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: vLLM ``VLLM_FUSED_MOE_CHUNK_SIZE`` default (tokens per fused-MoE chunk).
FUSED_MOE_CHUNK = 32768


@dataclass(frozen=True)
class ActivationPeak:
    """Peak activation bytes of the profiling pass on one GPU, by term."""

    tokens: int
    residual: float
    attention: float
    ffn: float
    sampler: float

    @property
    def layer_peak(self) -> float:
        return self.residual + max(self.attention, self.ffn)

    @property
    def total_bytes(self) -> float:
        return max(self.layer_peak, self.sampler)


def activation_peak(
    model: ModelSpec, par: Parallelism, tokens: int, max_num_seqs: int
) -> ActivationPeak:
    """The profiling-pass peak for ``tokens`` batched tokens and ``max_num_seqs`` sequences."""
    b = element_bytes(model.dtype)
    tp = par.tp
    h = model.hidden_size
    t = tokens
    residual = 2.0 * t * h * b
    attention = 0.0
    ffn_peak = 0.0
    for layer in model.layers:
        att = layer.attention
        heads = att.num_heads / tp
        if att.kind in ("full", "sliding"):
            kv_heads = max(1, att.num_kv_heads // tp)
            qkv = t * (heads * att.head_dim + 2 * kv_heads * att.head_dim) * b
            out = t * heads * att.v_head_dim * b
            attention = max(attention, qkv + out)
        elif att.kind in ("mla", "mla_sparse"):
            qk = att.qk_nope_head_dim + att.qk_rope_head_dim
            per_token = heads * (2 * qk + 2 * att.v_head_dim)
            attention = max(attention, t * per_token * b)
        else:
            attention = max(attention, t * heads * att.head_dim * 2 * b)
        ffn = layer.ffn
        if ffn.is_moe:
            inter = ffn.expert_intermediate_size / (1 if par.ep else tp)
            chunk = min(t, FUSED_MOE_CHUNK)
            work = chunk * ffn.experts_per_token * (3 * inter + h) * b
            work += t * ffn.num_experts * 4.0
            if ffn.shared_intermediate_size:
                work += 3.0 * t * ffn.shared_intermediate_size / tp * b
            ffn_peak = max(ffn_peak, work)
        else:
            ffn_peak = max(ffn_peak, 3.0 * t * ffn.intermediate_size / tp * b)
    rows = min(max_num_seqs, t)
    sampler = rows * model.vocab_size * (b + 8.0)
    return ActivationPeak(t, residual, attention, ffn_peak, sampler)
