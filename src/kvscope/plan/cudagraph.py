"""vLLM's CUDA-graph capture list and "Estimated CUDA graph memory" (sizes: tokens; bytes).

The capture list is ``VllmConfig._set_cudagraph_sizes`` (vllm/config/vllm.py): the default
``max_cudagraph_capture_size`` is ``min(max_num_seqs x 2, 512)`` at 0.11.1-0.12.0 and
``min(max_num_seqs x (1 + speculative tokens) x 2, 512)`` from 0.15.0 (read at 0.15.0, 0.20.0,
0.22.0, 0.25.0, 0.27.0), 1024 instead of 512 on data-center Blackwell (compute capability 10.x,
``is_device_capability_family(100)``) from 0.28.0 (absent in 0.27.0), capped by
``max_num_batched_tokens``; the sizes are 1, 2, 4, then every 8 below
256, then every 16 up to the cap, plus ``max_num_batched_tokens`` when it is below the cap.
With drafting, the V1 runner rounds every size up to a multiple of ``1 + k``
(``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``), and from 0.29.0 the decode
sizes ``n x (1 + k)`` for the request-count grid up to ``max_num_seqs`` join the list. The V2
runner (vllm/v1/worker/gpu/cudagraph_utils.py, 0.29.0) keeps the PIECEWISE list unrounded and
rounds only its FULL decode sizes; kvscope follows the V1 runner (the counts differ only with
drafting).

``CudagraphDispatcher.initialize_cudagraph_keys`` (vllm/v1/cudagraph_dispatcher.py, 0.20.0 and
0.25.0) then keys one PIECEWISE graph per size and, under the default ``FULL_AND_PIECEWISE``,
one FULL decode graph per size between ``1 + k`` and ``(1 + k) x max_num_seqs``.
``GPUModelRunner.profile_cudagraph_memory`` (vllm/v1/worker/gpu_model_runner.py, 0.20.0-0.31.0)
captures the two largest sizes of each mode and logs ``max(first captures) + sum((graphs - 1)
x second capture)``; the V2 runner (vllm/v1/worker/gpu/cudagraph_utils.py, 0.29.0) measures its
PIECEWISE graphs in full and extrapolates FULL ones the same way. So the estimate grows with the
number of graphs: kvscope takes the first capture as one graph's worth (the 8-graph starts at
``--max-num-seqs 8`` log 0.03-0.07 GiB for a 36-layer model, where the 101-graph default costs
0.87), and spreads the H100 fit of :data:`CUDAGRAPH_GIB` over the 101 graph units of the
configuration it was read at. Which starts take the capture list's units rather than the fit's
101 is the runner's rule (:func:`kvscope.plan.vllm_runner.graphs_by_capture_list`).

DeepSeek V4 on the V1 runner adds one term to the first capture (:func:`dsv4_first_capture_bytes`).
The V2 runner measures nothing before 0.29.0
(:func:`kvscope.plan.vllm_runner.graphs_profiled`): DSpark starts, which it alone runs,
subtract no graphs there.
"""

from __future__ import annotations

from kvscope.plan.dsv4_workspace import MAX_LOGITS_BYTES
from kvscope.specs.hardware import GIB, GPUSpec
from kvscope.specs.model import ModelSpec

#: CUDA-graph estimate on one GPU at 0.19's H100 defaults, GiB = base + per_layer x layers
#: (+ moe): a least-squares fit to 18 "Estimated CUDA graph memory" lines of vLLM 0.19 on H100
#: for dense models of 8-80 layers (mean absolute error 0.14 GiB), plus the mean excess of six
#: MoE rows (jgchn/llm-d-planner results_raw.csv, column cuda_graph_estimated_gib). The same
#: estimator (PR #30515) is what 0.20+ subtracts. Issues #45178/#45197 report cases where it
#: runs far higher.
CUDAGRAPH_GIB = {"base": 0.22, "per_layer": 0.018, "moe": 0.35}

#: The fit's configuration: ``vllm serve`` on an H100 (``max_num_seqs`` 1024,
#: ``max_num_batched_tokens`` 8192), capture sizes up to 512: 51 PIECEWISE + 51 FULL graphs,
#: i.e. 101 graph units (the first capture plus 100 further graphs).
FIT_GRAPH_UNITS = 101

#: Release from which the default cap multiplies by the decode query length ``1 + k``
#: (vllm/config/vllm.py of 0.15.0; 0.12.0 caps at ``max_num_seqs x 2``).
SPEC_FACTOR_SINCE = (0, 15, 0)
#: Release from which drafting appends the uniform decode sizes (vllm/config/vllm.py of 0.29.0;
#: absent in 0.28.0).
WIDE_CAP_SINCE = (0, 29, 0)
#: Release from which data-center Blackwell's default cap is 1024
#: (``VllmConfig._set_cudagraph_sizes`` in vllm/config/vllm.py of 0.28.0: ``1024 if
#: current_platform.is_device_capability_family(100) else 512``; 0.27.0: 512 on every GPU).
DC_BLACKWELL_CAP_SINCE = (0, 28, 0)


def _grid(cap: int) -> list[int]:
    """1, 2, 4, every 8 below 256, every 16 from 256, up to ``cap``."""
    sizes = [n for n in (1, 2, 4) if n <= cap]
    sizes += list(range(8, min(cap + 1, 256), 8))
    sizes += list(range(256, cap + 1, 16))
    return sizes


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _ceiling(release: tuple[int, int, int], gpu: GPUSpec | None) -> int:
    """The default cap's ceiling: 512, 1024 on data-center Blackwell from 0.28.0."""
    data_center_blackwell = gpu is not None and gpu.compute_capability[:3] == "10."
    if release >= DC_BLACKWELL_CAP_SINCE and data_center_blackwell:
        return 1024
    return 512


def capture_limit(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    release: tuple[int, int, int],
    speculative_tokens: int = 0,
    max_capture_size: int | None = None,
    gpu: GPUSpec | None = None,
) -> int:
    """``max_cudagraph_capture_size`` (tokens) before the V1 runner rounds the list to
    ``1 + k``: the largest size the V2 runner captures."""
    if max_capture_size is not None:
        return min(max_num_batched_tokens, max_capture_size)
    factor = 1 + speculative_tokens if release >= SPEC_FACTOR_SINCE else 1
    cap = min(max_num_seqs * factor * 2, _ceiling(release, gpu))
    return min(max_num_batched_tokens, cap)


def listed_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    release: tuple[int, int, int],
    speculative_tokens: int = 0,
    max_capture_size: int | None = None,
    gpu: GPUSpec | None = None,
) -> tuple[int, ...]:
    """``cudagraph_capture_sizes`` (tokens) as ``VllmConfig`` lists them, ascending: the V2
    runner's PIECEWISE list, before the V1 runner rounds it to ``1 + k``."""
    q = 1 + speculative_tokens
    uniform: list[int] = []
    cap = capture_limit(
        max_num_seqs, max_num_batched_tokens, release, speculative_tokens, max_capture_size, gpu
    )
    if max_capture_size is None and release >= WIDE_CAP_SINCE and q > 1:
        ceiling = _ceiling(release, gpu)
        counts = _grid(min(max_num_seqs, ceiling))
        counts = sorted({*counts, min(max_num_seqs, ceiling)})
        uniform = [n * q for n in counts if n * q <= cap]
    sizes = _grid(cap)
    if max_num_batched_tokens <= cap:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in uniform if s <= max_num_batched_tokens]
    return tuple(sorted(set(sizes)))


def capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    release: tuple[int, int, int],
    speculative_tokens: int = 0,
    max_capture_size: int | None = None,
    gpu: GPUSpec | None = None,
) -> tuple[int, ...]:
    """The PIECEWISE capture sizes (tokens) of the V1 runner at ``release``, ascending."""
    q = 1 + speculative_tokens
    sizes = list(
        listed_sizes(
            max_num_seqs,
            max_num_batched_tokens,
            release,
            speculative_tokens,
            max_capture_size,
            gpu,
        )
    )
    if q > 1 and sizes:
        top = sizes[-1]
        rounded = sorted({_round_up(s, q) for s in sizes if _round_up(s, q) <= top})
        sizes = rounded or ([q] if q <= top else [])
    return tuple(sizes)


def graph_counts(
    sizes: tuple[int, ...], max_num_seqs: int, speculative_tokens: int = 0
) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs under ``FULL_AND_PIECEWISE``: FULL decode graphs cover the
    sizes from ``1 + k`` to ``(1 + k) x max_num_seqs``."""
    q = 1 + speculative_tokens
    full = sum(1 for s in sizes if q <= s <= q * max_num_seqs)
    return len(sizes), full


def graph_units(sizes: tuple[int, ...], max_num_seqs: int, speculative_tokens: int = 0) -> int:
    """Graph units of the estimate for the capture list ``sizes`` (:func:`capture_sizes`):
    the shared first capture plus every further graph."""
    piecewise, full = graph_counts(sizes, max_num_seqs, speculative_tokens)
    return max(0, piecewise + full - 1)


def estimate_bytes(layers: int, moe: bool, units: int) -> float:
    """vLLM's logged CUDA-graph estimate on one GPU holding ``layers`` layers, bytes."""
    at_fit = CUDAGRAPH_GIB["base"] + CUDAGRAPH_GIB["per_layer"] * layers
    at_fit += CUDAGRAPH_GIB["moe"] if moe else 0.0
    return at_fit * GIB * units / FIT_GRAPH_UNITS


#: First wheel with DeepSeek V4 (and the indexer's dummy logits tensor).
DSV4_FIRST_CAPTURE_SINCE = (0, 20, 0)
#: First wheel where ``DeepseekV4ForCausalLM`` defaults to the V2 model runner on CUDA
#: (``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``, vllm/config/vllm.py of 0.28.0; absent in
#: 0.26.0 and 0.27.0, where V4 as a hybrid MoE model stays on the V1 runner).
DSV4_V2_RUNNER_SINCE = (0, 28, 0)


#: First wheel whose V2 model runner measures its graphs before the KV pool is sized
#: (``GPUModelRunner.profile_cudagraph_memory`` in vllm/v1/worker/gpu/model_runner.py returns
#: 0 at 0.25.0, 0.27.0 and 0.28.0; 0.29.0-0.31.0 call ``cudagraph_utils.profile_cudagraph_memory``).
V2_RUNNER_PROFILES_GRAPHS_SINCE = (0, 29, 0)
#: First wheel with DSpark drafting, which runs only on the V2 runner: ``VllmConfig`` forces
#: it whenever ``speculative_config.method == "dspark"`` (vllm/config/vllm.py, 0.25.0-0.31.0).
DSPARK_SINCE = (0, 25, 0)


def uses_v2_runner(model: ModelSpec, release: tuple[int, int, int], method: str | None) -> bool:
    """Whether vLLM at ``release`` runs ``model`` on its V2 model runner (CUDA): DSpark
    drafting forces it, and DeepSeek V4 defaults to it from 0.28.0 (only the cases kvscope
    models; ``VLLM_USE_V2_MODEL_RUNNER`` is not read)."""
    if method == "dspark" and release >= DSPARK_SINCE:
        return True
    return model.is_deepseek_v4 and release >= DSV4_V2_RUNNER_SINCE


def dsv4_first_capture_bytes(
    model: ModelSpec, layers: tuple[int, ...], release: tuple[int, int, int], gpu: GPUSpec
) -> float:
    """DeepSeek V4's first PIECEWISE capture beyond one graph's worth, bytes on one GPU.

    vLLM's V1 runner profiles PIECEWISE graphs with dummy runs that carry no attention
    metadata; in such a run ``sparse_attn_indexer`` (vllm/model_executor/layers/
    sparse_attn_indexer.py, 0.20.0-0.27.0) allocates a ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB``
    tensor and frees it. ``profile_cudagraph_memory`` (vllm/v1/worker/gpu_model_runner.py)
    empties the cache once, then reads the device's free memory around each warmup-and-capture
    on a new stream (``graph_capture``, vllm/distributed/parallel_state.py), so the first
    (largest) PIECEWISE sample keeps that block cached; each later capture empties the cache
    before it (``torch.cuda.graph``, or ``BreakableCUDAGraphWrapper._capture`` from 0.25.0) and
    allocates it again, so the second sample, and with it the per-graph term, does not.
    Zero where no layer of ``layers`` holds the indexer, before V4, on the V2 runner (its
    PIECEWISE dummy runs build attention metadata, vllm/v1/worker/gpu/cudagraph_utils.py of
    0.31.0) and off NVIDIA (ROCm's paths are not read).
    """
    if not DSV4_FIRST_CAPTURE_SINCE <= release < DSV4_V2_RUNNER_SINCE or gpu.vendor != "nvidia":
        return 0.0
    for i in layers:
        att = model.layers[i].attention
        if att.kind == "dsv4_csa" and att.index_head_dim:
            return float(MAX_LOGITS_BYTES)
    return 0.0
