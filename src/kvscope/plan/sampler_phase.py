"""Shape-free bytes of vLLM's V1-runner profiling sampler phase, read from the code.

On the last pipeline stage the profiling pass ends with a sampler run over S =
``min(max_num_seqs, T)`` rows (:mod:`kvscope.plan.activation`, term ``sampler``). Besides the
logits copies, torch's peak there holds, from the code:

- torch's cuBLAS workspace, taken from the caching allocator at the pass's first GEMM and
  kept for the handle and stream (``setWorkspaceForHandle`` / ``getNewWorkspace`` in
  pytorch/pytorch aten/src/ATen/cuda/CublasHandlePool.cpp; the cuBLASLt workspace shares it
  when unified, the default), sized by architecture and by the torch each release pins
  (:func:`kvscope.plan.cublas_workspace.cublas_workspace_bytes`).
- the sampled rows of the pass's hidden states: ``_dummy_run`` returns
  ``hidden_states[logit_indices]`` (S h b), which ``_dummy_sampler_run`` replaces with
  ``torch.rand_like`` of it (a second S h b) while ``profile_run`` keeps the first
  (vllm/v1/worker/gpu_model_runner.py of the 0.9.2, 0.10.0, 0.10.1.1, 0.11.0, 0.12.0,
  0.13.0, 0.17.0, 0.19.0, 0.20.0, 0.24.0, 0.26.0, 0.27.1 and 0.29.0 wheels).
- from 0.17.0 on the native sampler, the Triton top-k/top-p kernel's cached fp32 row buffer
  (:func:`triton_buffer_bytes`).

On V0 (``ModelRunner.execute_model``, vllm/worker/model_runner.py) the pass's hidden state
stays referenced through ``compute_logits`` and ``sample``, while ``LogitsProcessor.forward``
prunes the sampled rows into a local that is freed once the logits exist
(vllm/model_executor/layers/logits_processor.py): its sampler phase holds the workspace alone
beside the planned terms (0.6.3.post1, 0.7.2, 0.8.5 and 0.10.1.1 wheels; no Triton kernel).

These replace the fitted 0.12 GiB (``activation.RUNTIME_BYTES``) in the sampler phase on
NVIDIA GPUs: V1-runner starts from 0.9.2 and V0 starts from 0.6.3. The layer phase keeps the
constant (see :mod:`kvscope.plan.activation`). The V2 runner, ROCm and V0 before 0.6.3 are
not read here and keep it. So do V1 0.8.0-0.9.1, where the code differs: ``_dummy_run``
returns the gathered rows alone, so the pass's full hidden state (T h b, in the planned
``sampler`` term) is freed before the sampler runs, and 0.8.x draws no ``rand_like`` (0.8.4,
0.8.5, 0.9.0, 0.9.1 wheels). Reading that in (workspace + one or two S h b, no T h b) moves
the 0.8.4 / 0.8.5 starts on RTX 3090 and A10 further from their logged KV tokens
(hsc-4x3090-qwen25-7b-tp1 0.3 -> 2.9 %, tp2 3.6 -> 5.3 %, vold-a10-qwen25-15b 0.3 -> 1.1 %):
their sorting sampler path holds more than is modelled, and no log of that era prints its
peak, so the constant stays there.
"""

from __future__ import annotations

from kvscope.plan.cublas_workspace import cublas_workspace_bytes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: First release whose sampler phase is read here: ``profile_run`` keeps the pass's hidden
#: state and the gathered rows while ``_dummy_sampler_run`` draws ``rand_like`` of them.
CODE_SAMPLER_SINCE = (0, 9, 2)
#: First V0 release whose sampler phase is read here (0.6.3.post1, 0.7.2, 0.8.5, 0.10.1.1).
V0_CODE_SAMPLER_SINCE = (0, 6, 3)
#: Batches below this many rows still sort (``apply_top_k_top_p``, 0.17.0-0.29.0).
TRITON_MIN_ROWS = 8


def triton_buffer_bytes(model: ModelSpec, gpu: GPUSpec, rows: int) -> float:
    """Bytes of the Triton top-k/top-p kernel's cached scratch for a sampler run of ``rows``.

    From 0.17.0 the V1 sampler masks top-k / top-p with a Triton kernel for batches of 8 rows
    or more (``apply_top_k_top_p``, vllm/v1/sample/ops/topk_topp_sampler.py; vllm PR #33538),
    and the dummy sampler run asks for both (top-k = vocab - 1, top-p 0.9).
    ``apply_top_k_top_p_triton`` (vllm/v1/sample/ops/topk_topp_triton.py) launches
    ``NUM_PROGRAMS = min(num_sm, batch)`` programs with a float32 scratch of
    ``min(next_power_of_2(NUM_PROGRAMS), num_sm)`` vocabulary rows, cached per device, dtype
    and vocabulary (``_TRITON_BUFFER_CACHE``): made inside the sampler run and never freed.
    ``num_sm`` is torch's ``multi_processor_count``. Read in the 0.17.0, 0.19.0, 0.20.0,
    0.26.0, 0.27.1 and 0.29.0 wheels. On an H100 (132 SMs) at 1,024 rows: 0.06 GiB for a
    128K vocabulary.
    """
    sms = gpu.sm_count
    if sms is None or rows < TRITON_MIN_ROWS:
        return 0.0
    programs = min(sms, rows)
    size = min(1 << (programs - 1).bit_length(), sms)
    return float(size * model.vocab_size * 4)


def sampler_shape_free_bytes(
    model: ModelSpec,
    gpu: GPUSpec,
    v: tuple[int, int, int],
    rows: int,
    activation_bytes: float,
    triton: bool,
    v0: bool = False,
) -> float:
    """The sampler phase's shape-free bytes (the module text): the cuBLAS workspace; on the
    V1 runner the gathered and the random ``rows x hidden`` copies in the activation dtype
    (``activation_bytes`` per element), and the Triton row buffer when ``triton``; on V0
    (``v0``) the workspace alone."""
    if v0:
        return cublas_workspace_bytes(gpu, v)
    hidden = 2.0 * rows * model.hidden_size * activation_bytes
    buffer = triton_buffer_bytes(model, gpu, rows) if triton else 0.0
    return cublas_workspace_bytes(gpu, v) + hidden + buffer
