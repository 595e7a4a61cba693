"""Which vLLM engine a start runs, V0 or V1, by release and GPU (no units).

Releases before 0.8.0 run the V0 engine only. From 0.8.0 V1 is the default, but
``EngineArgs._is_v1_supported_oracle`` (vllm/engine/arg_utils.py) still sends a CUDA GPU
below compute capability 8.0 (Volta, Turing: V100, T4, RTX 2080 Ti) back to V0 when
``VLLM_USE_V1`` is unset: "Compute Capability < 8.0 is not supported by the V1 Engine.
Falling back to V0" (``_raise_or_fallback``). The check is in the 0.8.2, 0.9.2, 0.10.0 and
0.10.1.1 wheels and gone from the 0.10.2 wheel, whose V1 engine runs those GPUs itself.

A V0 start sizes its KV cache by V0's rules: its profiling pass samples every dummy sequence
with the sorting top-k/top-p sampler, it takes V0's batch defaults (``max_num_seqs`` 256, one
full-length prompt profiled without chunked prefill) and logs "# GPU blocks" (block count
times block size is its token capacity). Public check: Llama-3.2-3B-Instruct in float16 on
a Colab T4 under 0.8.2 logs a 0.90 GiB activation peak for 192 sequences, 9 fp32
vocabulary widths of 128,256 at 192 rows (0.83 GiB) plus the layers', where V1's FlashInfer
sampler would hold one (huggingface/cookbook notebook, row vold-t4-llama32-3b-sdk-0.8.2).
"""

from __future__ import annotations

from kvscope.specs.hardware import GPUSpec

#: First release whose engine default is V1.
V1_DEFAULT_SINCE = (0, 8, 0)
#: First release whose V1 engine runs GPUs below compute capability 8.0 (no V0 fallback).
V1_BELOW_SM80_SINCE = (0, 10, 2)


def runs_v0(version: tuple[int, int, int], gpu: GPUSpec) -> bool:
    """Whether vLLM ``version`` starts the V0 engine on ``gpu`` (``VLLM_USE_V1`` unset)."""
    if version < V1_DEFAULT_SINCE:
        return True
    if version >= V1_BELOW_SM80_SINCE or gpu.vendor != "nvidia":
        return False
    major = gpu.compute_capability.split(".")[0]
    return major.isdigit() and int(major) < 8
