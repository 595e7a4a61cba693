"""Peak activation memory of the engine's profiling forward pass, and the other non-KV terms.

vLLM sizes the KV cache after a dummy forward pass of ``max_num_batched_tokens`` tokens
(``GPUModelRunner.profile_run``) followed by a sampler pass over ``max_num_seqs`` rows; the
rise of torch's peak allocated bytes during it is the "activation peak" it subtracts
(``vllm/utils/mem_utils.py::memory_profiling``). Intermediate tensors of one layer are freed
before the next layer starts, so the peak is that of the widest layer, not a sum over layers.

Terms (per GPU, T = tokens of the pass, b = activation bytes = model dtype, tp = TP size):

- ``residual``: the hidden state and the residual stream, ``2 T h b``.
- ``attention``: the fused QKV projection output plus the attention output; for MLA the
  up-projected per-head Q/K/V of the prefill path, ``T nh/tp (2 qk + 2 v) b``; for a Gated
  DeltaNet layer its qkvz/ba projection output and core output (vLLM skips the recurrent
  kernel in the profiling pass: no attention metadata, ``qwen3_next.py``).
- ``mlp``: gate+up output (``2 T I/tp b``) live together with the activated half
  (``T I/tp b``) and the down projection's output (``T h b``; under TP the all-reduce
  returns a second ``T h b`` buffer), all taken as live at once: ``Qwen2MLP.forward`` keeps
  its gate+up tensor referenced until it returns, and the planner takes that, the larger
  case, for every dense MLP (logged peaks agree within the tolerance). Under an 8-bit
  weight-and-activation scheme (W8A8 int8, fp8) the down projection first quantizes the
  activated half to a one-byte copy (``T I/tp``; vLLM ``scaled_int8_quant`` /
  ``scaled_fp8_quant``), live with the rest (``Quantization.dense_activation_bytes``).
  The term is pinned by logged peaks (the llm-d study at vLLM 0.19: Mistral-Small-3.1-24B
  W8A8 2.18 GiB against 2.03 bf16), not by a reading of which tensors stand live: in eager
  mode ``LlamaMLP.forward`` drops the gate/up output before the down projection while
  ``Qwen2MLP.forward`` keeps it (vllm/model_executor/models/llama.py and qwen2.py of 0.19.0),
  and under torch.compile Inductor frees each buffer at its last use.
- ``moe_workspace``: fused-MoE scratch for every routed copy of a token, ``C k w b`` with
  C = min(T, 32768) = ``VLLM_FUSED_MOE_CHUNK_SIZE`` and the row width ``w`` of
  :func:`moe_scratch_width` (the engine's buffer shapes, I_e divided by tp without EP).
  Where vLLM runs the experts through its modular kernel it
  keeps these buffers between layers (its MoE workspace is reused, not freed), so they add
  to every later peak, the sampler's included. Kernels called directly allocate them per
  call (``moe_persistent=False``): then they only stack on the MoE layer's own hidden
  state and residual (see ``vllm_budget.moe_scratch_persists``).
- ``sampler``: the sampler pass over S = ``min(max_num_seqs, T)`` rows: logits in the model
  dtype plus three fp32 tensors of the same shape (float logits, probabilities, log-probs),
  ``S V (b + 12)`` (the fp32 count per release and sampler: ``vllm_sampler.
  sampler_fp32_copies``), while the pass's hidden states (``T h b``) are still held. Only the
  last pipeline stage runs it; other stages instead hold the hidden state and residual they
  send on (``2 T h b``).
- ``runtime``: a constant 0.12 GiB, fitted on H100s (see Calibration), not a sum of runner
  buffers: the V1 runner allocates input ids, positions and its other input buffers in
  ``GPUModelRunner.__init__``, before the profile, builds no attention metadata for it
  (``_dummy_run(is_profile=True)``) and its dummy sampling tensors are a few KiB
  (vllm/v1/worker/gpu_model_runner.py of the 0.19.0 wheel). Torch's cuBLAS workspace sits
  in it (a part that makes less: :mod:`kvscope.plan.cublas_workspace`). It stands for the
  fitted remainder of the LAYER phase (what the layer terms above miss), and of the sampler
  phase only where that phase is not read (``sampler_extra`` None).
- ``sampler_extra``: the sampler phase's shape-free bytes read from the code, in place of
  ``runtime`` there (:mod:`kvscope.plan.sampler_phase`, set by ``vllm_budget`` where the GPU
  and release are known): torch's cuBLAS workspace (32 MiB on sm90, 8.125 MiB elsewhere),
  on the V1 runner (from 0.9.2) the two ``S h b`` copies of the sampled rows and from 0.17 on
  the native sampler the Triton top-k/top-p row buffer; on V0 (from 0.6.3) the workspace.
- ``held``: buffers both phases hold (an attention backend's profiling workspace, parked
  encoder outputs, a PP stage's receive buffer), outside either constant.

Total: ``max(layer_peak + runtime, sampler + sampler_extra) + held + moe_workspace`` (the MoE
scratch of a direct kernel call only beside its own layer's hidden state and residual), or
the larger of a cold compile's, the encoder's or V0's cached-segment figure.

Calibration: vLLM 0.19 on H100 logs "torch peak memory increase" of 1.89 GiB (Llama-3.1-8B,
V = 128,256), 2.21 GiB (Qwen2.5-7B, V = 152,064), 2.21 GiB (Llama-3.1-8B in fp32), 1.21 GiB
(Mixtral TP2), 2.68 GiB (Qwen3-30B-A3B) and 1.10 GiB (first stage of PP2) with T = 8192 and
S = 1024 (jgchn/llm-d-planner accuracy/results/v0.19.0/results_raw.csv); the terms above
reproduce them within 0.1 GiB. Activations are released before the KV cache is allocated,
so an error here moves the KV budget one for one.

The sampler phase read from the code (``sampler_extra``) instead of 0.12 GiB: of the 111
vLLM rows whose logs print the profiling peak, 75 land within 0.01 GiB (36 with the constant
in both phases; median |error| 0.057 -> 0.005 GiB; 49 of the 54 llm-d 0.19 H100 peaks, 32
before: the others are the five layer-bound ones), none moving away by more than 0.006 GiB
(gpt-oss-20b's on 0.19 H100 land on 2.870 against the logged 2.87 with the MoE scratch of
Hopper's Triton MXFP4 path taken as per-call, ``vllm_budget.moe_scratch_persists``).
Using the code's bytes in the layer phase too leaves the layer-bound peaks 0.05-0.2 GiB
short (CodeLlama-7B, Granite-8B, the PP stages and Mistral-Small W8A8 at 0.19; A100 0.31,
V100 0.8.5, A800 0.6.6): the layer terms miss that much, so the fitted constant stays there
until they are derived.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.plan._cache import per_model_cache
from kvscope.plan.config import Parallelism
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: vLLM ``VLLM_FUSED_MOE_CHUNK_SIZE`` default (tokens per fused-MoE chunk).
FUSED_MOE_CHUNK = 32768
#: Fitted remainder of the profiling pass's layer phase, bytes (see the module docstring).
RUNTIME_BYTES = 0.12 * (1 << 30)


@dataclass(frozen=True)
class ActivationPeak:
    """Peak activation bytes of the profiling pass on one GPU, by term."""

    tokens: int
    residual: float
    attention: float
    mlp: float
    moe_workspace: float
    sampler: float
    runtime: float = RUNTIME_BYTES
    #: whether the MoE scratch stays allocated between layers (modular kernel workspace)
    moe_persistent: bool = True
    #: a cold compile's own peak before the pass (:mod:`kvscope.plan.compile_peak`); the
    #: engine logs the larger of the two
    compile_peak: float = 0.0
    #: the multimodal encoder's phase of the pass (:mod:`kvscope.plan.vit_peak`), before the
    #: language model's; torch's peak is the larger of the phases
    encoder_peak: float = 0.0
    #: V0 up to 0.6.3 charges the allocator's reserved segments of the layer phase
    #: (:mod:`kvscope.plan.v0_cached_segments`); the shape-independent buffers come on top
    cached_segments: float = 0.0
    #: buffers made in or before the pass that both phases hold (an attention backend's
    #: profiling workspace, parked encoder outputs, a PP stage's receive buffer)
    held: float = 0.0
    #: the sampler phase's shape-free bytes read from the code, in place of ``runtime``
    #: there (:mod:`kvscope.plan.sampler_phase`); None keeps ``runtime`` in both phases
    sampler_extra: float | None = None

    @property
    def layer_peak(self) -> float:
        return self.residual + max(self.attention, self.mlp)

    @property
    def total_bytes(self) -> float:
        layer_fixed = self.runtime + self.held
        extra = self.runtime if self.sampler_extra is None else self.sampler_extra
        sampler = self.sampler + extra + self.held
        if self.moe_persistent:
            forward = max(self.layer_peak + layer_fixed, sampler) + self.moe_workspace
        else:
            moe_layer = self.residual + self.moe_workspace if self.moe_workspace else 0.0
            forward = max(max(self.layer_peak, moe_layer) + layer_fixed, sampler)
        cached = self.cached_segments + layer_fixed if self.cached_segments else 0.0
        return max(forward, self.compile_peak, self.encoder_peak, cached)


def moe_scratch_width(inter: float, hidden: int, modular: bool) -> float:
    """Elements a routed token copy holds in the fused-MoE scratch, for a gated expert of
    ``inter`` columns a rank and ``hidden`` wide.

    The modular kernel (``moe_persistent``) sizes its two buffers by the experts class's
    ``workspace_shapes``: ``workspace1`` (M, topk, max(I, h)) and ``workspace2``
    (M, topk, max(2I, h)), the output reusing ``workspace1`` (``TritonExperts`` in
    vllm/model_executor/layers/fused_moe/fused_moe.py of the 0.11.1, 0.15.0 and 0.20.0
    wheels, experts/triton_moe.py of 0.21.0 and 0.26.0; ``MarlinExperts`` in
    experts/marlin_moe.py of 0.26.0 and ``DeepGemmExperts`` / ``DeepGemmFP4Experts`` in
    experts/deep_gemm_moe.py of 0.25.0 have the same widths; DeepGEMM adds per-expert row
    padding, not modelled). A direct call (``fused_experts_impl``, fused_moe.py of 0.11.1;
    ``fused_marlin_moe``, marlin_moe.py of 0.26.0) allocates one M x topk x max(2I, h)
    buffer for the gate/up and down outputs and one M x topk x I for the activation. Both
    stay ``2 h`` wide or more when a rank's expert slice is narrower than the hidden size.
    """
    activation = max(inter, hidden) if modular else inter
    return max(2 * inter, hidden) + activation


@per_model_cache()
def activation_peak(
    model: ModelSpec,
    par: Parallelism,
    tokens: int,
    max_num_seqs: int,
    last_stage: bool = True,
    sampler_fp32_copies: int = 3,
    moe_persistent: bool = True,
) -> ActivationPeak:
    """The profiling-pass peak for ``tokens`` batched tokens and ``max_num_seqs`` sequences."""
    b = element_bytes(model.dtype)
    tp = par.tp
    h = model.hidden_size
    t = tokens
    act_q = model.quantization.dense_activation_bytes
    residual = 2.0 * t * h * b
    attention = 0.0
    mlp = 0.0
    workspace = 0.0
    for layer in model.layers:
        att = layer.attention
        heads = att.num_heads / tp
        if att.kind == "gdn":
            # Gated DeltaNet: the qkvz + ba projection output and the core output
            kd, vd = att.lin_k_heads * att.lin_k_dim, att.lin_v_heads * att.lin_v_dim
            proj = t * (2 * kd + 2 * vd + 2 * att.lin_v_heads) / tp * b
            attention = max(attention, proj + t * vd / tp * b)
        elif att.kind in ("full", "sliding"):
            kv_heads = max(1, att.num_kv_heads // tp)
            q_width = heads * att.head_dim * (2 if att.output_gate else 1)
            qkv = t * (q_width + 2 * kv_heads * att.head_dim) * b
            out = t * heads * att.v_head_dim * b
            attention = max(attention, qkv + out)
        elif att.kind in ("mla", "mla_sparse"):
            qk = att.qk_nope_head_dim + att.qk_rope_head_dim
            attention = max(attention, t * heads * (2 * qk + 2 * att.v_head_dim) * b)
        else:
            attention = max(attention, t * heads * att.head_dim * 2 * b)
        ffn = layer.ffn
        if ffn.is_moe:
            inter = ffn.expert_intermediate_size / (1 if par.ep else tp)
            chunk = min(t, FUSED_MOE_CHUNK)
            width = moe_scratch_width(inter, h, moe_persistent)
            workspace = max(workspace, chunk * ffn.experts_per_token * width * b)
            shared = 3.0 * t * ffn.shared_intermediate_size / tp * b
            mlp = max(mlp, shared + t * ffn.num_experts * 4.0)
        else:
            down = t * h * b * (2 if tp > 1 else 1)
            # W8A8 / fp8: the down projection's one-byte quantized copy of the activated half
            quant = t * ffn.intermediate_size / tp * act_q
            mlp = max(mlp, 3.0 * t * ffn.intermediate_size / tp * b + down + quant)
    if last_stage:
        rows = min(max_num_seqs, t)
        sampler = rows * model.vocab_size * (b + 4.0 * sampler_fp32_copies) + t * h * b
    else:
        sampler = 0.0
        residual += 2.0 * t * h * b  # hidden state and residual handed to the next stage
    return ActivationPeak(
        t, residual, attention, mlp, workspace, sampler, moe_persistent=moe_persistent
    )
