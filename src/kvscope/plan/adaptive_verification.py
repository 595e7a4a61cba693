"""DSpark adaptive verification's profiling runs inside vLLM's CUDA-graph estimate (bytes, tokens).

With ``enable_adaptive_verification`` (a DSpark option, off by default: vllm/config/
speculative.py), the V2 model runner's ``capture_model`` times dummy runs to seed the
verification cost tables: after the graph captures, still inside the window between the
two free-memory readings it reports as graph memory, it runs
``AdaptiveVerificationManager.batches_to_profile`` (vllm/v1/worker/gpu/model_runner.py and
spec_decode/adaptive_verification.py of the 0.30.0 and 0.31.0 wheels): every captured token
count, then the sizes past the capture limit ``c`` up to ``max_num_batched_tokens`` (``c +
c // 2`` and the doublings of ``c``), each five times with an 8,192-token context
(``VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN``). ``profile_cudagraph_memory``
(vllm/v1/worker/gpu/cudagraph_utils.py) runs ``capture_model(profile_only=True)`` for the
estimate, so these runs happen there too. The runs past the capture limit replay no graph:
they run eagerly, and nothing empties torch's allocator cache before the closing reading, so
what they leave cached counts as graph memory and comes off the KV pool. vLLM 0.33.0 runs
them only in the real capture and empties the cache after them ("Release the profiling runs'
activations, or the allocator cache is counted as graph memory below", model_runner.py).

Size, per GPU: the eager sizes run in ascending order and torch's caching allocator keeps
every freed block until the cache is emptied; a request larger than every cached free block
takes a new segment, and each size's activations are larger than the previous size's (the
sizes at least 1.5x apart), so each size leaves its own transient peak cached. kvscope prices
a size's transient peak with the profiling pass's layer terms at that token count (hidden
state and residual or DeepSeek V4's mHC streams, the MLP tensors and a DSpark drafter's
captured target states: :mod:`kvscope.plan.activation`, :mod:`kvscope.plan.dsv4_activation`)
with the attention layer as it runs here (these runs carry attention metadata, the profiling
pass skips attention): on DeepSeek V4 ``o_padded`` and the padded query
(:func:`kvscope.plan.dsv4_activation.running_attention_bytes`). Left out: what stays allocated
from the profiling pass (the MoE and attention workspaces the worker's workspace manager
keeps, the input buffers) and the sampler, which these dummy runs do not call. Not priced (so
a floor): the drafter's own pass over the batch, the indexer's logits over the 8,192-token
context and blocks the allocator cannot reuse across a size's five replays. Releases read:
0.30.0 and 0.31.0 (0.27.0 has no adaptive verification; 0.28 and 0.29 not read); 0.32 is not
read and kept with 0.31.
"""

from __future__ import annotations

from dataclasses import replace

from kvscope.plan.activation import activation_peak
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.cudagraph import capture_limit
from kvscope.plan.drafter import aux_capture_layers
from kvscope.plan.dsv4_activation import dsv4_attention_peak, running_attention_bytes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: Releases whose graph estimate holds the adaptive profiling runs: [SINCE, UNTIL).
SINCE = (0, 30, 0)
UNTIL = (0, 33, 0)


def enabled(eng: EngineConfig) -> bool:
    """Whether ``eng`` runs DSpark with adaptive verification at a release that counts it."""
    spec = eng.speculative
    if spec is None or spec.method != "dspark" or not SINCE <= eng.version < UNTIL:
        return False
    return bool(spec.raw_dict().get("enable_adaptive_verification", False))


def eager_sizes(limit: int, max_num_tokens: int) -> tuple[int, ...]:
    """Token counts ``batches_to_profile`` runs past the capture limit ``limit``, ascending
    (``limit`` at most ``max_num_tokens``: the capture list is capped by the batch; checked
    against the 0.30.0 and 0.31.0 code by ``benchmarks/vllm_oracle_adaptive.py``)."""
    if not limit:
        return ()
    size, tail = limit, {min(limit + limit // 2, max_num_tokens)}
    while size < max_num_tokens:
        size = min(size * 2, max_num_tokens)
        tail.add(size)
    return tuple(sorted(s for s in tail if s > limit))


def profiling_cache_bytes(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    last_stage: bool,
) -> float:
    """Bytes the adaptive profiling runs leave in torch's cache on one GPU (0 without them)."""
    if not enabled(eng):
        return 0.0
    spec = eng.speculative
    k = spec.num_speculative_tokens if spec is not None else 0
    limit = capture_limit(
        max_num_seqs, max_num_batched_tokens, eng.version, k, eng.max_cudagraph_capture_size, gpu
    )
    aux = aux_capture_layers(model, spec) if last_stage else ()
    fp4 = eng.indexer_dtype == "fp4"
    total = 0.0
    for t in eager_sizes(limit, max_num_batched_tokens):
        act = activation_peak(model, par, t, max_num_seqs, last_stage, 0)
        v4 = dsv4_attention_peak(model, gpu, par.tp, t, eng.version, fp4, False, aux)
        if v4 is not None:
            # v4.layer is the profiling branch's (no metadata); these runs take the running one
            act = replace(
                act, residual=max(act.residual, v4.stream), attention=act.attention + v4.aux
            )
        # these runs carry attention metadata: V4's layer runs attention (the pass skips it)
        run = running_attention_bytes(model, gpu, par.tp, t, eng.version, fp4)
        act = replace(act, attention=max(act.attention, run + (v4.aux if v4 else 0.0)))
        total += act.layer_peak
    return total
