"""The graphs speculative decoding adds to vLLM's V2-runner CUDA-graph estimate (graphs; bytes
on one GPU), vLLM 0.29-0.32.

``profile_cudagraph_memory`` (vllm/v1/worker/gpu/cudagraph_utils.py, read in the 0.30.0 and
0.31.0 wheels) reads the free-memory drop around ``capture_model(profile_only=True)``: every
PIECEWISE graph and every speculator graph is captured and measured in full, and the FULL
graphs of the runner's own manager are sampled (the two largest) and extrapolated as the
first sample plus ``n - 1`` times the second. So the estimate grows with the number of graphs,
and drafting adds graphs in two places:

- the target's lists. ``VllmConfig._set_cudagraph_sizes`` (vllm/config/vllm.py) caps the list
  at ``max_num_seqs x (1 + k) x 2`` and appends the uniform decode sizes (:func:`kvscope.plan.
  cudagraph.listed_sizes`); ``CudaGraphManager._init_candidates`` keys one PIECEWISE graph per
  listed size and one FULL decode graph per size rounded up to ``1 + k`` up to ``max_num_seqs
  x (1 + k)`` (with adaptive verification, ``varlen_decode``: one per listed size up to that
  bound, unrounded);
- the drafter's own manager. DSpark and DFlash (``DFlashSpeculator.init_cudagraph_manager``,
  vllm/v1/worker/gpu/spec_decode/dflash/speculator.py) capture FULL_DECODE_ONLY graphs at
  ``decode_query_len`` = the query tokens a request drafts in one pass: ``k`` for DSpark's
  anchor-as-first layout (``sample_from_anchor``, default true,
  spec_decode/dspark/speculator.py), ``1 + k`` for DFlash; ``capture_model`` runs
  ``speculator.capture()`` inside the measured window, and the profiler swaps the global pool
  so these land on the throwaway pool and count in full.

kvscope's V2 estimate keeps the H100 fit (:data:`kvscope.plan.cudagraph.FIT_GRAPH_UNITS`
units, which also stands in for workspaces built lazily during capture; :func:`kvscope.plan.
vllm_runner.graphs_by_capture_list`), read on speculation-off starts. This module prices what
drafting adds on top: the target's extra graphs at the fit's per-graph rate for the target's
layers, the drafter's FULL graphs at that rate for the drafter's layers, and, on DeepSeek V4,
the larger first FULL sample: the sparse indexer's decode logits (``fp8_fp4_paged_mqa_logits``,
vllm/utils/deep_gemm.py: ``[B x next_n, max_model_len]`` float32, the indexer's length being
``max_model_len // compress_ratio``; vllm/model_executor/layers/sparse_attn_indexer.py) are
allocated inside the largest FULL decode graph, whose token count grows from ``max_num_seqs``
to ``max_num_seqs x (1 + k)``. The per-graph rate is checked against the speculation-off V4.1
launch's real capture (0.37 GiB for 19 PIECEWISE + 11 FULL graphs, 13 MiB a graph; the fit's
rate for 40 MoE layers is 13.1 MiB). Other drafters' own graphs (EAGLE, MTP) are not read and
not priced; their target-side graphs are.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.plan.cudagraph import capture_limit, estimate_bytes, listed_sizes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: Releases read whose V2 estimate measures the graphs as above: [SINCE, UNTIL) (0.29 profiles
#: graphs, ``V2_RUNNER_PROFILES_GRAPHS_SINCE``; 0.32 is not read and kept with 0.31).
SINCE = (0, 29, 0)
UNTIL = (0, 33, 0)
#: Drafters whose own FULL graphs are read (DFlash's capture path, DSpark its subclass).
PARALLEL_DRAFTERS = frozenset({"dspark", "dflash"})
#: Bytes of one decode logit of the sparse indexer (float32).
LOGIT_BYTES = 4


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def decode_graph_sizes(
    sizes: tuple[int, ...], max_num_seqs: int, query_len: int, cap: int, varlen: bool = False
) -> tuple[int, ...]:
    """Token counts of the FULL decode graphs a V2 ``CudaGraphManager`` keys for the listed
    ``sizes`` at ``query_len`` tokens a request, ascending (``_init_candidates``)."""
    bound = max_num_seqs * query_len
    if varlen:
        return tuple(s for s in sizes if s <= bound)
    return tuple(
        sorted(
            {_round_up(s, query_len) for s in sizes if _round_up(s, query_len) <= min(bound, cap)}
        )
    )


def target_graphs(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    release: tuple[int, int, int],
    k: int,
    gpu: GPUSpec | None = None,
    varlen: bool = False,
) -> tuple[int, tuple[int, ...]]:
    """(PIECEWISE graphs, FULL decode sizes) of the V2 runner's own manager under the default
    ``FULL_AND_PIECEWISE`` with ``k`` draft tokens (``k`` = 0: no drafting)."""
    sizes = listed_sizes(max_num_seqs, max_num_batched_tokens, release, k, None, gpu)
    cap = capture_limit(max_num_seqs, max_num_batched_tokens, release, k, None, gpu)
    return len(sizes), decode_graph_sizes(sizes, max_num_seqs, 1 + k, cap, varlen)


def drafter_graphs(
    method: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    release: tuple[int, int, int],
    k: int,
    gpu: GPUSpec | None = None,
) -> int:
    """FULL graphs the drafter's own manager captures (0 where its path is not read)."""
    if method not in PARALLEL_DRAFTERS or k < 1:
        return 0
    query = k if method == "dspark" else 1 + k
    sizes = listed_sizes(max_num_seqs, max_num_batched_tokens, release, k, None, gpu)
    cap = capture_limit(max_num_seqs, max_num_batched_tokens, release, k, None, gpu)
    return len(decode_graph_sizes(sizes, max_num_seqs, query, cap))


def indexer_logit_length(model: ModelSpec, max_model_len: int) -> int:
    """Columns of DeepSeek V4's indexer decode logits: the longest indexer length over the
    layers that run an indexer (0 on other models)."""
    if not model.is_deepseek_v4:
        return 0
    longest = 0
    for layer in model.layers:
        att = layer.attention
        runs = att.kind == "dsv4_csa" or (att.kind == "dsv41" and att.index_source)
        if runs and att.index_head_dim:
            longest = max(longest, max_model_len // max(1, att.compress_ratio))
    return longest


def drafting_graph_bytes(
    model: ModelSpec,
    eng: EngineConfig,
    gpu: GPUSpec,
    layers: int,
    moe: bool,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    last_stage: bool,
) -> float:
    """Bytes drafting adds to the V2 runner's fitted estimate on one GPU holding ``layers``
    target layers (0 without drafting, outside [SINCE, UNTIL) or under an explicit capture cap,
    where the planner already follows the capture list)."""
    spec = eng.speculative
    if spec is None or not SINCE <= eng.version < UNTIL or eng.max_cudagraph_capture_size:
        return 0.0
    k = spec.num_speculative_tokens
    if k < 1:
        return 0.0
    seqs, mnbt, v = max_num_seqs, max_num_batched_tokens, eng.version
    varlen = bool(spec.raw_dict().get("enable_adaptive_verification", False))
    pw0, full0 = target_graphs(seqs, mnbt, v, 0, gpu)
    pwk, fullk = target_graphs(seqs, mnbt, v, k, gpu, varlen)
    extra = max(0, pwk + len(fullk) - pw0 - len(full0))
    total = estimate_bytes(layers, moe, extra)
    top0, topk = max(full0, default=0), max(fullk, default=0)
    total += max(0, topk - top0) * indexer_logit_length(model, max_model_len) * LOGIT_BYTES
    if last_stage and spec.method == "dspark" and model.dspark_stages:
        # the stages are the target's own decoder layer (``DeepseekV4DecoderLayer`` in
        # models/deepseek_v4*/nvidia/dspark.py), so they are MoE where the target is
        drafts = drafter_graphs(spec.method, seqs, mnbt, v, k, gpu)
        total += estimate_bytes(model.dspark_stages, moe, drafts)
    return float(total)
