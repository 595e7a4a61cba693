"""Which model runner vLLM starts a model on (V1 ``GPUModelRunner`` or the V2 runner), by
release, and the two profiling terms the V2 runner leaves out (CUDA; sizes in fp32 widths);
also whether a start of the V1 era falls back to the V0 engine.

V0 fallback: 0.8 and 0.9 still ship the V0 engine and ``EngineArgs._is_v1_supported_oracle``
sends a CUDA device of compute capability below 8.0 (T4, V100, RTX 20xx) back to it ("Compute
Capability < 8.0 is not supported by the V1 Engine. Falling back to V0", vllm/engine/arg_utils.py
of the 0.8.2 and 0.9.2 wheels); such a start profiles as V0 does, its dummy batch sampling with
top-p 0.99 and top-k = vocab - 1 through the sorting sampler (``ModelRunner.profile_run``,
vllm/worker/model_runner.py, and ``_apply_top_k_top_p``, vllm/model_executor/layers/sampler.py
of 0.8.2), and reports its pool as "# cuda blocks". Before 0.8 every start is V0.

``VllmConfig.use_v2_model_runner`` (vllm/config/vllm.py; read in the PyPI wheels 0.22.0, 0.23.0,
0.24.0, 0.25.0, 0.26.0, 0.27.0, 0.28.0, 0.29.0, 0.31.0 and 0.33.0), when
``VLLM_USE_V2_MODEL_RUNNER`` is unset:

- DSpark drafting forces V2 (0.25.0+), and DeepSeek V4 defaults to it from 0.28.0
  (:func:`kvscope.plan.cudagraph.uses_v2_runner`).
- ``_is_default_v2_model_runner_model``: 0.22.0 takes ``Qwen3ForCausalLM`` and 0.23.0 adds
  ``LlamaForCausalLM`` and ``MistralForCausalLM``, each only when neither MoE nor quantized;
  0.24.0 takes its list whatever the weights (Qwen3, Llama, Mistral, ``DeepseekV2ForCausalLM``,
  ``Qwen2MoeForCausalLM``, ``GraniteMoeForCausalLM``); 0.25.0-0.28.0 take every model that is
  not MoE, or MoE on their list, and no hybrid (linear-attention) model except one on the
  list (0.27.0 on). From 0.29.0 there is no list: every model on CUDA.
- ``_get_v2_model_runner_unsupported_features`` sends a start back to V1 for, among others,
  a drafter other than EAGLE / EAGLE-3 / MTP (DFlash from 0.24.0, DSpark from 0.25.0), n-gram
  drafting included; and 0.22.0 for any hybrid model.

What the V2 runner's profiling pass (vllm/v1/worker/gpu/model_runner.py) does not hold:

- CUDA graphs: ``profile_cudagraph_memory`` returns 0 in the 0.22.0-0.28.0 wheels, so
  ``Worker.determine_available_memory`` subtracts no estimate; 0.29.0 measures the graphs.
- The sampler's fp32 pipeline: ``_dummy_sampler_run`` samples once over a dummy batch whose
  requests were never added, so temperature 0, top-k = vocabulary and top-p 1 leave
  ``Sampler._requires_logits_processing`` False: no fp32 copy of the logits, no top-k/top-p
  (vllm/v1/worker/gpu/sample/sampler.py and states.py of 0.27.0; the same in 0.31.0). 0.33.0
  adds a second pass with ``SamplingParams.for_sampler_warmup()`` that "pays for the fp32
  logits pipeline". kvscope applies the greedy pass only before 0.29.0, where the runner
  subtracts no graph estimate either: from 0.29.0 the V2 runner measures its PIECEWISE graphs
  in full, an estimate kvscope still takes from the V1 fit, and the one such log here
  (vLLM 0.31.0, Llama-3.1-8B on an A100, peak activation 1.44 GiB with the estimate) is
  0.3 GiB short of the greedy pass plus that fit; the V1 sampler count stays until V2's own
  estimate is modelled.

ROCm's defaults (other architecture lists) are not read: off NVIDIA the V1 runner is kept.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.plan.cudagraph import V2_RUNNER_PROFILES_GRAPHS_SINCE, uses_v2_runner
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

V2_DEFAULT_SINCE = (0, 22, 0)
#: Releases from 0.8 below this one fall back to V0 on compute capability < 8.0 (module text).
V0_FALLBACK_BEFORE = (0, 10, 0)
#: From this release every model defaults to the V2 runner on CUDA (no architecture list).
V2_FOR_ALL_SINCE = (0, 29, 0)
#: First release that ships no V1 model runner (the 0.34.0 wheel has no
#: vllm/v1/worker/gpu_model_runner.py and no ``use_v2_model_runner``): every start is V2.
V2_ONLY_SINCE = (0, 34, 0)
#: First release whose V2 dummy sampler pass also runs the fp32 warmup pipeline.
V2_SAMPLER_WARMUP_PASS_SINCE = (0, 33, 0)

#: ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` by release, as HF ``model_type`` values:
#: qwen3 = Qwen3ForCausalLM, llama = LlamaForCausalLM, mistral = MistralForCausalLM,
#: deepseek_v2 = DeepseekV2ForCausalLM, qwen2_moe = Qwen2MoeForCausalLM,
#: granitemoe = GraniteMoeForCausalLM (DeepseekV4ForCausalLM: :func:`uses_v2_runner`).
_DEFAULT_TYPES = (
    ((0, 22, 0), frozenset({"qwen3"})),
    ((0, 23, 0), frozenset({"qwen3", "llama", "mistral"})),
    (
        (0, 24, 0),
        frozenset({"qwen3", "llama", "mistral", "deepseek_v2", "qwen2_moe", "granitemoe"}),
    ),
    ((0, 25, 0), frozenset({"deepseek_v2", "qwen2_moe", "granitemoe"})),
)
_V2_DRAFTERS = (
    ((0, 22, 0), frozenset({"eagle", "eagle3", "mtp"})),
    ((0, 24, 0), frozenset({"eagle", "eagle3", "mtp", "dflash"})),
    ((0, 25, 0), frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})),
)


def _at(table: tuple[tuple[tuple[int, int, int], frozenset[str]], ...], v: tuple[int, int, int]):  # type: ignore[no-untyped-def]
    chosen = table[0][1]
    for since, value in table:
        if v >= since:
            chosen = value
    return chosen


def _hybrid(model: ModelSpec) -> bool:
    return "gdn" in model.attention_kinds


def runs_v0(eng: EngineConfig, gpu: GPUSpec | None = None) -> bool:
    """Whether the start runs vLLM's V0 engine: every release before 0.8, and 0.8-0.9 on a
    CUDA device of compute capability below 8.0 (module text)."""
    if eng.version < (0, 8, 0):
        return True
    if gpu is None or gpu.vendor != "nvidia" or eng.version >= V0_FALLBACK_BEFORE:
        return False
    return int(gpu.compute_capability.split(".")[0]) < 8


def runs_v2(model: ModelSpec, eng: EngineConfig, gpu: GPUSpec) -> bool:
    """Whether vLLM at ``eng``'s release starts ``model`` on its V2 model runner (the module
    text; the environment variable is not read)."""
    spec = eng.speculative
    return v2_by_default(model, eng.version, spec.method if spec else None, gpu.vendor)


def v2_by_default(
    model: ModelSpec, v: tuple[int, int, int], method: str | None = None, vendor: str = "nvidia"
) -> bool:
    """:func:`runs_v2` from the release, the drafter (``method``) and the GPU vendor alone."""
    if v >= V2_ONLY_SINCE or uses_v2_runner(model, v, method):
        return True
    if vendor != "nvidia" or v < V2_DEFAULT_SINCE:
        return False
    if method is not None and method not in _at(_V2_DRAFTERS, v):
        return False
    if v >= V2_FOR_ALL_SINCE:
        return True
    # the lists name text-only classes (Qwen3ForCausalLM, ...), never a vision-language
    # wrapper (Qwen3VLForConditionalGeneration, ...), whatever its text tower's type
    listed = model.model_type in _at(_DEFAULT_TYPES, v) and not model.vision_params
    quantized = model.quantization.method != "none"
    if v < (0, 24, 0):
        return listed and not model.is_moe and not quantized and not _hybrid(model)
    if v < (0, 25, 0):
        return listed
    if _hybrid(model) and (v < (0, 27, 0) or not listed):
        return False
    return listed or not model.is_moe


def graphs_profiled(model: ModelSpec, eng: EngineConfig, gpu: GPUSpec) -> bool:
    """False where the start's runner logs no CUDA-graph estimate (V2 before 0.29.0)."""
    return not runs_v2(model, eng, gpu) or eng.version >= V2_RUNNER_PROFILES_GRAPHS_SINCE


def greedy_dummy_sampler(model: ModelSpec, eng: EngineConfig, gpu: GPUSpec) -> bool:
    """True where the profiling sampler pass holds no fp32 copy of the logits: V2 starts
    before 0.29.0 (the module text; 0.29.0-0.32.0 are left on the V1 count, see there)."""
    return runs_v2(model, eng, gpu) and eng.version < V2_RUNNER_PROFILES_GRAPHS_SINCE


def graphs_by_capture_list(model: ModelSpec, eng: EngineConfig, gpu: GPUSpec) -> bool:
    """Whether the planned CUDA-graph estimate follows the start's capture list (True) or keeps
    the 101-unit H100 fit (False).

    The V1 runner's ``GPUModelRunner.profile_cudagraph_memory`` (vllm/v1/worker/
    gpu_model_runner.py, same structure in the 0.22.0, 0.25.0, 0.27.0 and 0.31.0 wheels)
    captures the two largest sizes of each mode and logs the first capture plus
    ``(graphs - 1) x`` the second, so its estimate scales with the graph count, which the
    default capture list caps by ``max_num_seqs`` (:func:`kvscope.plan.cudagraph.capture_sizes`).
    The V2 runner from 0.29.0 (``profile_cudagraph_memory`` in vllm/v1/worker/gpu/
    cudagraph_utils.py of 0.31.0) measures the whole PIECEWISE capture in free memory, so its
    figure also holds the workspaces built lazily during capture (0.4-0.9 GiB on the DeepSeek
    V4 starts that log it); kvscope does not model those, and keeps the fit there, which
    stands in for them, unless an explicit ``--max-cudagraph-capture-size`` is given (before
    0.29.0 the V2 runner measures nothing, :func:`graphs_profiled`).
    """
    return eng.max_cudagraph_capture_size is not None or not runs_v2(model, eng, gpu)
