"""SGLang 0.5.3+: the defaults from ``_handle_gpu_memory_settings`` (0.5.19+: ``arg_groups``),
where the reserve follows the chunk size and the CUDA-graph limits. See the package docstring."""

from __future__ import annotations

from kvscope.plan.sglang_defaults.common import (
    GIB_MIB,
    SglangDefaults,
    Version,
    _Args,
    _vlm_factor,
)


def _since_053(
    a: _Args,
    *,
    mla: bool,
    prefill_cuda_graph: bool | None,
    piecewise_max_tokens: int | None,
    disable_cuda_graph: bool,
    max_running_requests: int | None,
    num_draft_tokens: int | None,
    max_total_tokens: int | None,
    context_length: int | None,
    model_path: str,
    deepep: bool,
    deepseek_nsa: bool,
    deepseek_v4: bool,
    post_capture: bool,
    qwen3_vl_hopper: bool,
) -> SglangDefaults:
    """0.5.3+: ``_handle_gpu_memory_settings`` / ``handle_gpu_memory_settings``."""
    v, gpu, tp, pp, dp, notes = a.v, a.gpu_mem, a.tp, a.pp, a.dp, a.notes
    class_chunked, class_cgmb = _class_defaults(gpu, tp, v)
    chunked = class_chunked if a.chunked is None else a.chunked
    cgmb = class_cgmb if a.cgmb is None else a.cgmb
    defaulted = a.cgmb is None
    mrr = max_running_requests
    if defaulted and v >= (0, 5, 22) and mrr is not None and cgmb > mrr:
        cgmb = mrr
        notes.append("decode limit capped by max_running_requests")
    widen = qwen3_vl_hopper and v >= (0, 5, 20) and a.cuda_graph_bs is None
    big = gpu is not None and gpu >= 60 * GIB_MIB
    if defaulted and widen and big and mrr is not None and cgmb < mrr <= 512:
        cgmb = mrr
        notes.append("Qwen3-VL on Hopper: decode limit widened to max_running_requests")
    if a.cuda_graph_bs:
        cgmb = max(a.cuda_graph_bs)

    disagg = a.disagg
    # DP attention as the reserve sees it: 0.5.15+ resolves the dp == 1 reset first.
    dp_attn = a.dp_attention and (dp > 1 or v < (0, 5, 15))
    spec = a.spec

    # piecewise (0.5.4+) / prefill (0.5.14+) CUDA graph
    if prefill_cuda_graph is None:
        graph_on = _prefill_graph_auto(
            v,
            speculative=spec is not None,
            dp_attention=dp_attn,
            pp=pp,
            rocm=a.rocm,
            is_multimodal=a.is_multimodal,
            disaggregated=disagg != "null",
            mla=mla,
            deepseek_nsa=deepseek_nsa,
            deepseek_v4=deepseek_v4,
            deepep=deepep,
        )
    else:
        graph_on = prefill_cuda_graph and v >= (0, 5, 4)
    max_tokens = _prefill_max_tokens(
        v, chunked, mla, pp, piecewise_max_tokens, max_total_tokens, context_length, model_path
    )
    graph_sizes = _prefill_graph_sizes(max_tokens, v)
    decode_graph = not (disable_cuda_graph and v >= (0, 5, 15))

    reserved: float | None = None
    rule = "given"
    if a.mfs is not None:
        mfs = a.mfs
    else:
        if post_capture and v >= (0, 5, 16):
            reserved = 512.0 if v < (0, 5, 18) else 1536.0
            reserved += tp * pp / 8 * 1024
            rule = "0.5.16+ post-capture floor"
        else:
            reserved = _reserve_053(
                a,
                chunked,
                cgmb,
                dp_attn,
                graph_on,
                graph_sizes,
                max_tokens,
                mla,
                decode_graph,
                deepep,
                max_running_requests,
                num_draft_tokens,
            )
            rule = "0.5.3+ reserved"
        if gpu is None:
            mfs = 0.88 if v < (0, 5, 20) else 0.95
            reserved = None
            rule = "no GPU memory: 0.88" if v < (0, 5, 20) else "no GPU memory: 0.95"
        else:
            mfs = round((gpu - reserved) / gpu, 3)
        vlm = a.is_multimodal and not (disagg == "decode" and v >= (0, 5, 17))
        if vlm:
            if post_capture and v >= (0, 5, 20):
                if gpu is not None:
                    mfs -= 8 * GIB_MIB / gpu
                notes.append("multimodal under post-capture sizing: - 8 GiB")
            elif a.has_vision_config:
                mfs *= _vlm_factor(*a.vit)
                notes.append("multimodal: ViT-size factor")

    # model-specific adjustments, then DP attention divides the chunk
    chunk_dp = dp if a.dp_attention else 1
    if deepseek_nsa and v < (0, 5, 8):
        # CUDA and ROCm alike (only NPU is exempt): DP attention with dp = tp until 0.5.5,
        # with the given dp (a no-op at dp == 1) in 0.5.6-0.5.7.
        chunk_dp = tp if v < (0, 5, 6) else dp
        notes.append("DeepSeek NSA turns DP attention on")
        if v < (0, 5, 4):
            mfs = 0.8
            reserved = None
            rule = "0.5.3 DeepSeek NSA fixed 0.8"
    if chunk_dp > 1:
        chunked //= chunk_dp
    return SglangDefaults(
        mem_fraction_static=mfs,
        chunked_prefill_size=chunked,
        cuda_graph_max_bs=cgmb,
        reserved_mib=reserved,
        rule=rule,
        prefill_cuda_graph=graph_on,
    )


def _class_defaults(gpu_mem: float | None, tp: int, v: Version) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by memory class, 0.5.3+ (CUDA / ROCm)."""
    if gpu_mem is None:
        return 4096, 160
    if gpu_mem < 20 * GIB_MIB:
        return 2048, 8
    if gpu_mem < 35 * GIB_MIB:
        if v >= (0, 5, 20):
            return 4096, 48 if tp < 4 else 160
        return 2048, (16 if v < (0, 5, 5) else 24) if tp < 4 else 80
    if gpu_mem < 60 * GIB_MIB:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem < 160 * GIB_MIB:  # the < 90 GiB and < 160 GiB classes are equal
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def _prefill_graph_auto(
    v: Version,
    *,
    speculative: bool,
    dp_attention: bool,
    pp: int,
    rocm: bool,
    is_multimodal: bool,
    disaggregated: bool,
    mla: bool,
    deepseek_nsa: bool,
    deepseek_v4: bool,
    deepep: bool,
) -> bool:
    """Whether SGLang turns the piecewise / prefill CUDA graph on by itself.

    0.5.10 - 0.5.14: torch.compile piecewise graphs, on unless (0.5.10 only) speculative
    decoding, DP attention, PP > 1, ROCm, a multimodal model or PD disaggregation. 0.5.15+:
    breakable graphs on CUDA (other platforms: off), off for MLA (0.5.15-0.5.16; 0.5.17 only
    non-DSA MLA), DP attention and MoE all-to-all (0.5.15-0.5.16), DeepSeek V4, multimodal
    models (allow-listed archs excepted, 0.5.16+), PP > 1 (0.5.19+).
    """
    if v < (0, 5, 10):
        return False
    if v < (0, 5, 15):
        if speculative and v < (0, 5, 11):
            return False
        return not (dp_attention or pp > 1 or rocm or is_multimodal or disaggregated)
    if rocm or deepseek_v4 or is_multimodal:
        return False
    if v < (0, 5, 17):
        return not (mla or dp_attention or deepep)
    if v < (0, 5, 18):
        return not (mla and not deepseek_nsa)
    return not (pp > 1 and v >= (0, 5, 19))


def _prefill_graph_sizes(max_tokens: int, v: Version) -> list[int]:
    """Token counts of the piecewise / prefill CUDA graphs.

    ``_generate_piecewise_cuda_graph_tokens``; 0.5.14+ ``_generate_prefill_cuda_graph_batch_sizes``.
    """
    sizes = list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
    if v < (0, 5, 8):
        sizes += list(range(640, 4097, 128)) + list(range(4352, max_tokens + 1, 256))
    else:
        sizes += list(range(640 if v < (0, 5, 9) else 576, 1025, 64))
        sizes += list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512))
    return [s for s in sizes if s <= max_tokens]


def _prefill_max_tokens(
    v: Version,
    chunked: int,
    mla: bool,
    pp: int,
    given: int | None,
    max_total_tokens: int | None,
    context_length: int | None,
    model_path: str,
) -> int:
    """Largest piecewise / prefill graph size (token count)."""
    if given is not None:
        tokens = given
    elif v < (0, 5, 7):
        return 4096
    else:
        if not mla or v < (0, 5, 8):
            tokens = chunked
        elif v < (0, 5, 23):
            tokens = 2048
        else:
            tokens = min(8192, chunked)
        if v >= (0, 5, 19) and pp > 1:
            tokens = min(tokens, 8192)  # only reached when the graph is forced on with PP
        if v >= (0, 5, 10):
            if max_total_tokens is not None:
                tokens = min(tokens, max_total_tokens)
            if "llama-2" in model_path.lower():
                tokens = min(tokens, 4096)
    if context_length is not None and (0, 5, 13) <= v < (0, 5, 17):
        tokens = min(tokens, context_length)
    return tokens


def _reserve_053(
    a: _Args,
    chunked: int,
    cgmb: int,
    dp_attn: bool,
    graph_on: bool,
    graph_sizes: list[int],
    max_tokens: int,
    mla: bool,
    decode_graph: bool,
    deepep: bool,
    max_running_requests: int | None,
    num_draft_tokens: int | None,
) -> float:
    """Memory kept out of the static pool, MiB (0.5.3+, without post-capture sizing)."""
    v, gpu, tp, pp, dp, spec, disagg = a.v, a.gpu_mem, a.tp, a.pp, a.dp, a.spec, a.disagg
    pd = v >= (0, 5, 15)  # PD-disaggregation-aware terms
    reserved = 512.0
    if pd and disagg == "decode":
        running = max_running_requests or cgmb or 1
        reserved += max(running * (num_draft_tokens or 1), 2048) * 1.5
    elif chunked > 0:
        reserved += max(chunked, 2048) * 1.5
    else:
        reserved += max(a.max_prefill_tokens, 2048) * 1.5
    if not pd or (disagg != "prefill" and decode_graph):
        reserved += cgmb * 2
    reserved += tp * pp / 8 * 1024
    if dp_attn and not (pd and disagg == "prefill"):
        reserved += cgmb * dp * 3
        if cgmb > 300:
            reserved += cgmb * dp * 1.5
    prefill_graph_term = graph_on and not (pd and disagg == "decode")
    if prefill_graph_term and v >= (0, 5, 8):
        if mla and v >= (0, 5, 10):
            reserved += 1.5 * 1024
        else:
            reserved += len(graph_sizes) * 8
        if v >= (0, 5, 17) and deepep:
            reserved += 1 * 1024  # breakable prefill graph with DeepEP
    if gpu is not None and gpu > 60 * GIB_MIB:
        reserved = max(reserved, 10.0 * GIB_MIB)
    if spec is not None and v < (0, 5, 14):
        if spec == "STANDALONE":
            reserved += 6 * GIB_MIB
        elif spec != "NGRAM":
            reserved += (2 if v < (0, 5, 10) else 4) * GIB_MIB
    if prefill_graph_term and (0, 5, 6) <= v < (0, 5, 8):
        reserved += max_tokens // 4 if v < (0, 5, 7) else max_tokens // 8
    if pd and deepep and disagg != "prefill" and decode_graph:
        reserved += 2 * GIB_MIB
    return reserved
