"""Torch peak of vLLM's first Inductor compile inside the profiling pass (bytes, one GPU).

vLLM compiles the model at its first forward, which is the profiling pass
(``Worker.determine_available_memory`` runs ``profile_run`` inside ``memory_profiling``,
vllm/v1/worker/gpu_worker.py and vllm/utils/mem_utils.py at v0.29.0), so whatever the compile
allocates through torch's caching allocator rises into the "peak activation" the engine
subtracts. A start whose compile cache is warm loads the compiled graph ("Directly load AOT
compilation ..." / "Directly load the compiled graph(s) ...") and allocates nothing for it.

On a cold start, from vLLM 0.11.1 (the first release pinning torch 2.9.0), ``CompilationConfig``
turns on Inductor's horizontal fusion with ``combo_kernels`` and ``benchmark_combo_kernel``
(vllm/config/compilation.py, ``__post_init__``: "use horizontal fusion ..."; read in the 0.11.1,
0.12.0, 0.15.0, 0.20.0, 0.22.0, 0.23.0, 0.25.0-0.27.0, 0.29.0 and 0.31.0 wheels; absent in
0.10.2). Inductor then benchmarks each fusion
candidate (``Scheduler.speedup_by_combo_kernel`` -> ``benchmark_fused_nodes`` ->
``benchmark_codegened_module``, torch/_inductor/scheduler.py and codegen/triton.py at torch
2.13.0), calling the kernel module's ``get_args()``: one ``rand_strided`` tensor on the device,
at full size, for every buffer the kernel reads or writes
(``TritonKernel.codegen_kernel_benchmark``). The first piece of a decoder's split graph gathers
the token embeddings and applies the first RMSNorm; its kernel's arguments are the whole
embedding table of the rank and two ``[T, hidden]`` outputs (the hidden state and the residual),
``T`` the size hint of the compiled range (``max_num_batched_tokens``). So the cold start's
torch peak is at least

    ceil(V / (64 tp)) x 64 x hidden x b  +  2 x T x hidden x b

(b: model dtype bytes). It is a peak of its own, before any activation is allocated: the engine
logs the larger of it and the forward pass's peak. Five cold 0.29.0 starts log it to 0.01 GiB
(transient peak = logged "peak activation" minus the logged CUDA-graph estimate): Qwen3-8B on a
48 GB RTX 4090 at T = 4,096 and 512 (1.21 and 1.16 GiB; rule 1.22 and 1.17), Qwen3-14B and its
AWQ build on an L40S at T = 2,048 (1.48 and 1.48; rule 1.49) and at T = 8,192 (1.60; rule 1.60);
warm starts of the same 8B configuration log 0.37 GiB (yuanjuju/vllm-lab phase3/results,
samilazrak/vllm-optimization-lab results/raw).

Not covered: ``--enforce-eager`` (no compile), DeepSeek V4 from 0.23.0 (``VllmConfig`` turns on
``VLLM_USE_BREAKABLE_CUDAGRAPH`` for ``DeepseekV4ForCausalLM`` and sets ``-cc.mode=none``,
vllm/config/vllm.py), vision-language wrappers (the runner embeds the tokens outside the
compiled graph, so no embedding kernel is benchmarked), and pipeline stages after the first
(they hold no embedding). Whether a start is cold is the state of its cache folder
(``VLLM_CACHE_ROOT``, default ``~/.cache/vllm``), not a flag of the command, so the planner
applies this only when told (``EngineConfig.cold_compile``).
"""

from __future__ import annotations

import math

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: First vLLM release whose default compilation benchmarks Inductor's combo kernels (torch 2.9).
COMBO_KERNEL_BENCHMARK_SINCE = (0, 11, 1)
#: First vLLM release that runs DeepSeek V4 without torch.compile (breakable CUDA graphs).
DSV4_NO_COMPILE_SINCE = (0, 23, 0)
#: vLLM pads the vocabulary to a multiple of this before splitting it over TP
#: (``VocabParallelEmbedding``, ``DEFAULT_VOCAB_PADDING_SIZE``).
VOCAB_PADDING = 64


def compiles_cold(model: ModelSpec, eng: EngineConfig, pp_rank: int = 0) -> bool:
    """Whether this rank's profiling pass holds the cold compile's benchmark peak."""
    if not eng.cold_compile or eng.engine != "vllm" or eng.enforce_eager:
        return False
    v = eng.version
    if v < COMBO_KERNEL_BENCHMARK_SINCE or pp_rank != 0 or model.vision_params:
        return False
    return not (model.is_deepseek_v4 and v >= DSV4_NO_COMPILE_SINCE)


def cold_compile_peak_bytes(model: ModelSpec, par: Parallelism, tokens: int) -> float:
    """Arguments of the benchmarked embedding + first-norm kernel on one GPU, bytes."""
    b = element_bytes(model.dtype)
    rows = math.ceil(model.vocab_size / (VOCAB_PADDING * par.tp)) * VOCAB_PADDING
    return (rows * model.hidden_size + 2.0 * tokens * model.hidden_size) * b
