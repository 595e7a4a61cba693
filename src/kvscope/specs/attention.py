"""Attention layers: their weights and the KV state they keep.

Kinds (``AttentionLayer.kind``):
- ``full``: MHA/GQA/MQA over the whole history. K and V of ``num_kv_heads x head_dim`` each.
- ``sliding``: the same, keeping only the last ``window`` tokens (Mistral, gpt-oss).
- ``mla``: Multi-head Latent Attention (DeepSeek-V2 paper, arXiv 2405.04434 §2.1): one latent
  of ``kv_lora_rank + qk_rope_head_dim`` per token, shared by all heads, not split over TP.
- ``mla_sparse``: DeepSeek-V3.2 (DSA): MLA plus a lightning-indexer key cache.
- ``dsv4_swa`` / ``dsv4_csa`` / ``dsv4_hca``: DeepSeek V4 hybrid attention
  (``compress_ratios`` 0 / 4 / 128): a 128-token window on every layer, CSA keeps one
  compressed entry per 4 tokens plus indexer keys, HCA one per 128 tokens.
- ``dsv41``: DeepSeek V4.1 (``compress_ratios`` 0 / 1 / 2). Every layer keeps its own window;
  only the ``kv_source_layer_ids`` layers own a compressed cache (one entry per 1 or 2 tokens),
  the indexer keys beside it and (ratio 2) a compressor ring; the other compressed layers read
  the latest source below them. Indexers run on ``index_source_layer_ids`` only (vLLM
  ``vllm/models/deepseek_v41/attention.py`` at v0.31.0: ``is_kv_source``, ``is_index_source``,
  ``get_kv_cache_spec`` returns None for non-sources).
- ``gdn``: Gated DeltaNet linear attention (Qwen3-Next, arXiv 2412.06464): no per-token KV,
  a fixed per-request state (causal-conv window and one key x value matrix per value head).
  The full-attention layers beside it are gated (``output_gate``: q_proj doubled).
  Kimi Delta Attention (``lin_variant`` ``kda``: Kimi Linear / Kimi K3, arXiv 2510.26692)
  keeps the same state shapes (vLLM ``MambaStateShapeCalculator.kda_state_shape``) with its
  own projections; the MLA layers beside it may carry an output gate (``g_proj``).

Cache entry sizes (bytes) and their sources:
- V3.2 ``fp8_ds_mla`` record: 656 B = 512 fp8 NoPE + 4 fp32 scales (16 B) + 64 bf16 RoPE
  (128 B) (vLLM ``vllm/v1/kv_cache_interface.py``, FlashMLA sparse layout).
- V3.2/V4 indexer key: 128 fp8 + one fp32 scale = 132 B; V4 MXFP4 indexer: 64 + 4 = 68 B
  (vLLM ``DeepseekV4IndexerCache``, ``vllm/v1/attention/backends/mla/indexer.py``).
- V4 compressed/window entry: 584 B = 448 fp8 NoPE + 64 bf16 RoPE + 7 UE8M0 scales + 1 pad.
- V4 compressor rings (fp32 kv+score): CSA 8 rows x 8192 B + indexer 8 rows x 2048 B, HCA
  128 rows x 4096 B (vLLM ``CompressorStateCache``, DeepSeek-V4 compressor).
- V4.1 compressor ring (ratio 2 only): 8 rows x (2 x head_dim) fp32 = 32 KiB per request
  (``CompressorStateCache`` of ``vllm/models/deepseek_v41/compressor.py`` at v0.31.0: ring of
  ``max(8, next power of two of drafts + 2)`` rows; 8 without speculative decoding).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.specs.dtypes import element_bytes, is_fp8
from kvscope.specs.kv_state import KVCache

DS_MLA_FP8_RECORD = 656
INDEXER_FP8_ENTRY = 132
INDEXER_FP4_ENTRY = 68
DSV4_ENTRY = 584
DSV4_CSA_STATE = 8 * 8192 + 8 * 2048
DSV4_HCA_STATE = 128 * 4096
#: V4.1 compressor ring rows without speculative decoding (see the module text)
DSV41_RING_ROWS = 8


def indexer_entry_bytes(indexer_dtype: str) -> int:
    """Bytes of one token's sparse-indexer key for the indexer cache dtype (fp8 or fp4)."""
    return INDEXER_FP4_ENTRY if indexer_dtype in ("fp4", "mxfp4") else INDEXER_FP8_ENTRY


@dataclass(frozen=True)
class AttentionLayer:
    """One layer's attention: shapes (parameters) and kind (KV state)."""

    kind: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    window: int | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    sinks: bool = False
    # MLA
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    # sparse-attention indexer (V3.2, V4 CSA)
    index_n_heads: int = 0
    index_head_dim: int = 0
    # DeepSeek V4
    compress_ratio: int = 0
    o_groups: int = 0
    o_lora_rank: int = 0
    # DeepSeek V4.1: this layer owns a compressed cache / runs an indexer; its Engram block's
    # GPU weights (the hash tables themselves stay in host memory, see config_parse)
    kv_source: bool = False
    index_source: bool = False
    engram_params: int = 0
    # gated full attention (Qwen3-Next): q_proj also emits a per-head output gate
    output_gate: bool = False
    # Gated DeltaNet linear attention (kind "gdn", Qwen3-Next / Qwen3.5): its heads and
    # widths, the causal-conv kernel, and the bytes of one element of its conv state and of
    # its recurrent (ssm) state
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 0
    conv_state_bytes: float = 2.0
    ssm_state_bytes: float = 2.0
    # whether the config names ``mamba_ssm_dtype`` (else the recurrent state is in the
    # model dtype above, vLLM's "auto"; SGLang then keeps it in float32)
    ssm_dtype_named: bool = False
    # "kda": Kimi Delta Attention's projections (kind "gdn"); kda_full_gate: its output gate
    # is one full-rank g_proj (Kimi K3's use_full_rank_gate) rather than g_a / g_b
    lin_variant: str = ""
    kda_full_gate: bool = False
    # Gemma 4: ``attention_k_eq_v`` global layers ship k_proj only (K reused as V; vLLM still
    # allocates the V slot of its fused qkv_proj and caches V beside K), and the last
    # ``num_kv_shared_layers`` layers project Q only and read an earlier layer's cache
    k_eq_v: bool = False
    kv_shared: bool = False

    @property
    def is_mla_family(self) -> bool:
        return self.kind in ("mla", "mla_sparse", "dsv4_swa", "dsv4_csa", "dsv4_hca", "dsv41")

    # ----------------------------------------------------------------- parameters
    def num_params(self) -> int:
        """Weights of this layer's attention block (norms inside it included)."""
        h, nh = self.hidden_size, self.num_heads
        if self.kind == "gdn":
            return self._gdn_params()
        if self.kind in ("full", "sliding"):
            q = h * nh * self.head_dim * (2 if self.output_gate else 1)
            kv = 0 if self.kv_shared else 2 * h * self.num_kv_heads * self.head_dim
            o = nh * self.v_head_dim * h
            n = q + kv + o
            if self.qkv_bias:
                n += nh * self.head_dim + 2 * self.num_kv_heads * self.head_dim
            if self.o_bias:
                n += h
            if self.qk_norm:
                n += self.head_dim if self.kv_shared else 2 * self.head_dim
            if self.sinks:
                n += nh
            return n
        if self.kind in ("mla", "mla_sparse"):
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nh * qk
            else:
                q = h * nh * qk
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * nh * (self.qk_nope_head_dim + self.v_head_dim)
            o = nh * self.v_head_dim * h
            n = q + kv_a + kv_b + o
            if self.output_gate:  # Kimi Linear's mla_use_output_gate: g_proj h -> heads x v
                n += h * nh * self.v_head_dim
            if self.kind == "mla_sparse":
                # V3.2 indexer: wq_b, wk, k_norm (LayerNorm weight+bias), weights_proj.
                q_in = self.q_lora_rank or h
                n += q_in * self.index_n_heads * self.index_head_dim
                n += h * self.index_head_dim + 2 * self.index_head_dim
                n += h * self.index_n_heads
            return n
        return self._dsv4_params()

    def _gdn_params(self) -> int:
        # vLLM qwen3_next.py Qwen3NextGatedDeltaNet: in_proj_qkvz (q, k of the key heads,
        # v, z of the value heads), in_proj_ba (two scalars per value head), a depthwise
        # causal conv1d over q|k|v without bias, dt_bias and A_log per value head, the gated
        # RMSNorm over one value head, out_proj.
        h = self.hidden_size
        if self.lin_variant == "kda":
            return self._kda_params()
        kd, vd = self.lin_k_heads * self.lin_k_dim, self.lin_v_heads * self.lin_v_dim
        n = h * (2 * kd + 2 * vd) + h * 2 * self.lin_v_heads
        n += (2 * kd + vd) * self.conv_kernel + 2 * self.lin_v_heads + self.lin_v_dim
        return n + vd * h

    def _kda_params(self) -> int:
        # vLLM KimiDeltaAttention (kimi_gdn_linear_attn.py, 0.25.0; models/kimi_k3/nvidia/
        # kda.py, 0.34.0): q/k/v h -> heads x dim, their depthwise convs, f_a (h -> dim) and
        # f_b (dim -> heads x dim), b_proj (h -> heads), A_log (heads), dt_bias (heads x dim),
        # the output gate (g_proj h -> heads x dim, or g_a / g_b through dim), o_norm (dim),
        # o_proj. Kimi K3's checkpoint lists exactly these tensors.
        h, heads, d = self.hidden_size, self.lin_v_heads, self.lin_v_dim
        p = heads * d
        n = 3 * h * p + 3 * p * self.conv_kernel + h * d + d * p + h * heads + heads + p
        n += h * p if self.kda_full_gate else h * d + d * p
        return n + d + p * h

    def kda_replicated_params(self) -> int:
        """KDA weights every TP rank holds whole: f_a, o_norm (and g_a without a full gate)."""
        h, d = self.hidden_size, self.lin_v_dim
        return h * d + d + (0 if self.kda_full_gate else h * d)

    def gdn_state_bytes(self, tp: int = 1, num_spec: int = 0) -> int:
        """Per-request state of one Gated DeltaNet layer on one TP rank: the conv window
        (``(kernel - 1 + num_spec) x (2 key + value)`` channels) and the recurrent matrix of
        every value head (``key_dim x value_dim``), as vLLM's ``MambaStateShapeCalculator.
        gated_delta_net_state_shape`` sizes them (heads split over TP). ``num_spec``: the
        speculative tokens a start drafts, which widen the conv window by as many rows
        (``conv_kernel_size - 1 + num_spec``, vllm/model_executor/layers/mamba/mamba_utils.py
        of the 0.28.0 and 0.30.0 wheels; ``num_spec`` is ``num_speculative_tokens`` in
        qwen3_5.py / qwen3_next.py)."""
        kh, vh = self.lin_k_heads // tp, self.lin_v_heads // tp
        rows = self.conv_kernel - 1 + num_spec
        conv = (2 * kh * self.lin_k_dim + vh * self.lin_v_dim) * rows
        ssm = vh * self.lin_k_dim * self.lin_v_dim
        return int(conv * self.conv_state_bytes + ssm * self.ssm_state_bytes)

    def _dsv4_params(self) -> int:
        # Shapes from the V4 reference modelling (transformers ``modeling_deepseek_v4``):
        # q low-rank (q_a, q_norm, q_b), one shared K=V head (kv_proj, kv_norm), grouped
        # low-rank output (o_a: o_lora x heads x head_dim in all, o_b), per-head sinks.
        h, nh, hd = self.hidden_size, self.num_heads, self.head_dim
        ql = self.q_lora_rank or h
        n = h * ql + ql + ql * nh * hd + h * hd + hd
        n += self.o_lora_rank * nh * hd + self.o_groups * self.o_lora_rank * h + nh
        if self.kind == "dsv4_csa":
            # Overlapping compressor (kv and gate to 2*head_dim), position bias, norm,
            # plus the lightning indexer with its own compressor at index_head_dim.
            n += 2 * h * 2 * hd + 4 * 2 * hd + hd
            ihd, inh = self.index_head_dim, self.index_n_heads
            n += 2 * h * 2 * ihd + 4 * 2 * ihd + ihd + ql * inh * ihd + h * inh
        elif self.kind == "dsv4_hca":
            n += 2 * h * hd + self.compress_ratio * hd + hd
        elif self.kind == "dsv41":
            n += self._dsv41_extra_params(ql)
        return n

    def _dsv41_extra_params(self, ql: int) -> int:
        # vllm/models/deepseek_v41 at v0.31.0: a kv source's DeepseekCompressor (compressor.py:
        # fused wkv (+ wgate when the ratio is 2) of h -> head_dim each, RMSNorm head_dim); an
        # index source's indexer (attention.py DeepseekV4Indexer: wq_b q_lora -> heads x dim,
        # weights_proj h -> heads; wk head_dim -> index dim and k_norm on kv sources only).
        h, hd, ihd, inh = self.hidden_size, self.head_dim, self.index_head_dim, self.index_n_heads
        n = self.engram_params
        if self.kv_source:
            n += h * hd * (2 if self.compress_ratio > 1 else 1) + hd
        if self.index_source:
            n += ql * inh * ihd + h * inh
            if self.kv_source:
                n += hd * ihd + ihd
        return n

    # ----------------------------------------------------------------- KV state
    def kv_caches(
        self, kv_dtype: str, tp: int = 1, indexer_dtype: str = "fp8"
    ) -> tuple[KVCache, ...]:
        """The caches one request keeps in this layer, on one tensor-parallel rank.

        ``kv_dtype`` is a resolved KV-cache dtype (``bfloat16``, ``fp8``, ``fp8_ds_mla``...).
        GQA heads are split over TP (``max(1, kv_heads // tp)``, vLLM
        ``ModelConfig.get_num_kv_heads``); MLA and V4 latents are replicated on every rank.
        """
        if self.kind == "gdn":  # a fixed state per request, nothing per token
            return (KVCache("gdn_state", 0.0, 1, None, self.gdn_state_bytes(tp)),)
        if self.kv_shared:  # reads an earlier layer's cache (vLLM kv_sharing_target_layer_name)
            return ()
        if self.kind in ("full", "sliding"):
            heads = max(1, self.num_kv_heads // tp)
            entry = heads * (self.head_dim + self.v_head_dim) * element_bytes(kv_dtype)
            window = self.window if self.kind == "sliding" else None
            return (KVCache("kv", entry, 1, window),)
        if self.kind in ("mla", "mla_sparse"):
            latent_dim = self.kv_lora_rank + self.qk_rope_head_dim
            # V3.2 with an fp8 cache uses the packed fp8_ds_mla record (FlashMLA sparse);
            # V2/V3 with plain fp8 store the 576-element latent at 1 byte each.
            if kv_dtype == "fp8_ds_mla" or (self.kind == "mla_sparse" and is_fp8(kv_dtype)):
                latent = float(DS_MLA_FP8_RECORD)
            else:
                latent = latent_dim * element_bytes(kv_dtype)
            caches = [KVCache("latent", latent)]
            if self.kind == "mla_sparse":
                caches.append(KVCache("indexer", float(INDEXER_FP8_ENTRY)))
            return tuple(caches)
        # DeepSeek V4: every layer keeps a 584-B record per token over the window.
        caches = [KVCache("swa", float(DSV4_ENTRY), 1, self.window or 128)]
        idx = indexer_entry_bytes(indexer_dtype)
        if self.kind == "dsv41":
            if self.kv_source and self.compress_ratio:
                caches.append(KVCache("compressed", float(DSV4_ENTRY), self.compress_ratio))
                if self.index_source:
                    caches.append(KVCache("indexer", float(idx), self.compress_ratio))
                if self.compress_ratio > 1:
                    ring = DSV41_RING_ROWS * 2 * self.head_dim * 4
                    caches.append(KVCache("compressor_state", 0.0, 1, None, ring))
            return tuple(caches)
        if self.kind == "dsv4_csa":
            caches.append(KVCache("csa", float(DSV4_ENTRY), self.compress_ratio))
            caches.append(KVCache("indexer", float(idx), self.compress_ratio))
            caches.append(KVCache("compressor_state", 0.0, 1, None, DSV4_CSA_STATE))
        elif self.kind == "dsv4_hca":
            caches.append(KVCache("hca", float(DSV4_ENTRY), self.compress_ratio))
            caches.append(KVCache("compressor_state", 0.0, 1, None, DSV4_HCA_STATE))
        return tuple(caches)
