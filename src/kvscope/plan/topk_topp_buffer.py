"""The Triton top-k/top-p kernel's row buffer in vLLM's profiling sampler pass, bytes.

From 0.17.0 the V1 sampler masks top-k / top-p with a Triton kernel for batches of 8 rows or
more (``apply_top_k_top_p``, vllm/v1/sample/ops/topk_topp_sampler.py; vllm PR #33538), and the
dummy sampler run asks for both (top-k = vocab - 1, top-p 0.9:
``GPUModelRunner._dummy_sampler_run``). ``apply_top_k_top_p_triton``
(vllm/v1/sample/ops/topk_topp_triton.py) launches ``NUM_PROGRAMS = min(num_sm, batch)``
programs and gives them a float32 scratch of ``min(next_power_of_2(NUM_PROGRAMS), num_sm)``
rows of the vocabulary, which it caches per device, dtype and vocabulary size
(``_TRITON_BUFFER_CACHE``): allocated inside the sampler pass and never freed, so torch's peak
of the pass holds it on top of the logits copies (:func:`kvscope.plan.vllm_budget.
sampler_fp32_copies`) and of any rejection-sampler pass that follows. ``num_sm`` is
``num_compute_units``: the GPU's SMs, or CUs on ROCm, where the same native path runs unless
AITER's sampler is on. Read in the 0.17.0, 0.19.0, 0.20.0, 0.26.0, 0.27.1 and 0.29.0 wheels
(same code; 0.34.0 keeps the buffer and drops the 8-row threshold). On an H100 (132 SMs) at
1,024 sequences that is 132 rows: 0.06 GiB for a 128K vocabulary, 0.07 for Qwen's 152K.

The V2 model runner's dummy sampler run skips top-k / top-p (``_dummy_sampler_run`` in
vllm/v1/worker/gpu/model_runner.py of 0.29.0: "the sampler may skip top_k, top_p, and
logprobs"), so only V1-runner starts take the buffer.
"""

from __future__ import annotations

from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: Batches below this many rows still sort (``apply_top_k_top_p``, 0.17.0-0.29.0).
MIN_ROWS = 8


def triton_buffer_bytes(model: ModelSpec, gpu: GPUSpec, rows: int) -> float:
    """Bytes of the kernel's cached scratch for a sampler pass of ``rows`` rows."""
    sms = gpu.sm_count
    if sms is None or rows < MIN_ROWS:
        return 0.0
    programs = min(sms, rows)
    size = min(1 << (programs - 1).bit_length(), sms)
    return float(size * model.vocab_size * 4)
