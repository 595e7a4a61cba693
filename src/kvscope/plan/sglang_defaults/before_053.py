"""SGLang 0.3.6 - 0.5.2: the three defaults as ``ServerArgs.__post_init__`` set them (and the
default capture list from 0.4.6). See the package docstring for the release table."""

from __future__ import annotations

from kvscope.plan.sglang_defaults.common import (
    _TABLE_036,
    _TABLE_040,
    GIB_MIB,
    SglangDefaults,
    Version,
    _Args,
    _need_gpu,
    _table,
    _vlm_factor,
)


def _before_053(a: _Args) -> SglangDefaults:
    """0.3.6 - 0.5.2: ``ServerArgs.__post_init__`` (and the capture list from 0.4.6)."""
    v, spec, notes = a.v, a.spec, a.notes
    dp = a.dp
    if v < (0, 4, 1):
        _need_gpu(a)  # 0.3.6 and 0.4.0 always run nvidia-smi / rocm-smi
    if a.dp_attention and dp == 1 and (0, 4, 5) <= v < (0, 5, 2):
        raise ValueError("this release rejects DP attention with dp == 1")
    reserved: float | None = None
    source = "server_args"

    # mem_fraction_static
    if a.mfs is not None:
        mfs, rule = a.mfs, "given"
    elif v < (0, 4, 6):
        mfs = _table(a.tp, _TABLE_036 if v < (0, 4, 0) else _TABLE_040)
        rule = "0.3.6 TP table" if v < (0, 4, 0) else "0.4.0-0.4.5 TP table"
    elif v < (0, 4, 7):
        gpu = _need_gpu(a)
        if gpu <= 81920:
            mfs, rule = _table(a.tp, _TABLE_040), "0.4.6 TP table"
        else:
            reserved = 13.0 * GIB_MIB
            mfs, rule = (gpu - reserved) / gpu, "0.4.6 13 GiB reserve"
    elif v < (0, 4, 8):
        mfs, reserved, rule = _mfs_047(a)
    else:
        mfs, reserved, rule = _mfs_048(a)
    if a.mfs is None and a.is_multimodal and v >= (0, 4, 9):
        if v < (0, 4, 10):
            mfs *= 0.90
            notes.append("multimodal: x0.90")
        elif a.has_vision_config:
            mfs *= _vlm_factor(*a.vit)
            notes.append("multimodal: ViT-size factor")

    # chunked_prefill_size
    chunked = a.chunked
    if v < (0, 4, 0):
        gpu = _need_gpu(a)
        chunked = 8192 if chunked is None else chunked
        if chunked <= 0:
            if gpu < 25000 or a.dp_attention:
                raise ValueError("SGLang 0.3.6 fails with chunked prefill off on this setup")
            chunked = -1
        elif gpu < 25000:
            chunked //= 4
    elif chunked is None:
        gpu_mem = a.gpu_mem if v >= (0, 4, 1) else _need_gpu(a)
        chunked = _chunked_before_053(gpu_mem, v, a.disagg)
    if (0, 4, 5) <= v < (0, 4, 10) and chunked > 0 and chunked % a.page_size:
        raise ValueError("chunked_prefill_size must be a multiple of page_size")

    # cuda_graph_max_bs
    cgmb = a.cgmb
    gpu_mem = a.gpu_mem
    if v < (0, 4, 0):
        cgmb = 4 if _need_gpu(a) < 25000 else (160 if cgmb is None else cgmb)
    elif cgmb is None:
        small = 25000 if v < (0, 4, 8) else 35 * GIB_MIB
        if gpu_mem is not None and gpu_mem < small:
            cgmb = 8 if (v < (0, 4, 1) or a.tp < 4) else 80
        elif v < (0, 4, 6):
            cgmb = 160
        else:
            source = "capture_list"
            if a.cuda_graph_bs:
                cgmb = max(a.cuda_graph_bs)
            else:
                cgmb = _capture_list_top(gpu_mem, v, spec is not None, dp)

    # DP attention (0.3.6-0.4.4 set dp = tp and halve the chunk) and speculative decoding
    if a.dp_attention:
        if v < (0, 4, 5):
            chunked //= 2
            if v < (0, 4, 1):
                cgmb = min(cgmb, 96)
        elif dp > 1:
            chunked //= dp
    if spec == "EAGLE" and (0, 4, 2) <= v < (0, 4, 4):
        chunked = -1
        notes.append("EAGLE turns chunked prefill off (0.4.2-0.4.3)")
    return SglangDefaults(
        mem_fraction_static=mfs,
        chunked_prefill_size=chunked,
        cuda_graph_max_bs=cgmb,
        reserved_mib=reserved,
        rule=rule,
        cuda_graph_max_bs_source=source,
    )


def _chunked_before_053(gpu_mem: float | None, v: Version, disagg: str) -> int:
    if v < (0, 4, 7):
        return 2048 if gpu_mem is not None and gpu_mem < 25000 else 8192
    if v < (0, 4, 8):
        if gpu_mem is not None and gpu_mem > 180000:
            return 16384
        if gpu_mem is not None and gpu_mem < 25000:
            return 2048
        return 16384 if disagg != "null" else 8192
    if gpu_mem is None:
        return 4096
    if gpu_mem < 35 * GIB_MIB:
        return 2048
    return 8192 if gpu_mem < 160 * GIB_MIB else 16384


def _mfs_047(a: _Args) -> tuple[float, float | None, str]:
    """0.4.7: TP*PP table up to 81920 MiB, then one of three large-GPU adjustments."""
    gpu = a.gpu_mem
    mfs = _table(a.tp * a.pp, _TABLE_040) if gpu is not None and gpu <= 81920 else 0.88
    if gpu is not None and gpu > 180 * 1000 and not a.rocm:
        return 0.79, None, "0.4.7 fixed 0.79 above 180000 MiB"
    if gpu is not None and gpu > 96 * GIB_MIB:
        reserve = 20.0 * GIB_MIB if a.spec is not None else 18.0 * GIB_MIB
        bonus = mfs + 48 * GIB_MIB * (1 - mfs) / gpu
        return min(bonus, (gpu - reserve) / gpu), reserve, "0.4.7 48 GiB bonus / reserve"
    if a.spec is not None:
        mfs *= 0.95
    return mfs, None, "0.4.7 TP*PP table"


def _mfs_048(a: _Args) -> tuple[float, float | None, str]:
    """0.4.8 - 0.5.2: reserve by capacity class."""
    gpu = a.gpu_mem
    if gpu is None:
        return 0.88, None, "no GPU memory: 0.88"
    p = a.tp * a.pp
    if gpu < 35 * GIB_MIB:
        reserved = (2.8 + p / 10) * GIB_MIB
    elif gpu < 90 * GIB_MIB:
        reserved = (9.5 + p / 2) * GIB_MIB
    elif gpu < 160 * GIB_MIB:
        reserved = (12 + p / 2) * GIB_MIB
    else:
        reserved = 32.0 * GIB_MIB
    if a.spec is not None:
        reserved += 6 * GIB_MIB if a.spec == "STANDALONE" and a.v >= (0, 5, 2) else 2 * GIB_MIB
    if a.dp_attention:
        reserved += 4 * GIB_MIB
    return round((gpu - reserved) / gpu, 3), reserved, "0.4.8-0.5.2 reserved by class"


def _capture_list_top(gpu_mem: float | None, v: Version, speculative: bool, dp: int) -> int:
    """Top of ``get_batch_sizes_to_capture``'s default list when server args leave the limit
    unset (0.4.6 - 0.5.2), before the runtime trims it to the request pool."""
    top = 152 if speculative and v < (0, 4, 7) else 160
    if gpu_mem is None:
        return top
    if v < (0, 4, 7):
        return 256 if gpu_mem > 81920 and dp == 1 else top
    if v < (0, 4, 8):
        if gpu_mem > 180 * 1000:
            return 512
        return 256 if gpu_mem > 96 * GIB_MIB else top
    if gpu_mem > 160 * 1000:
        return 512
    return 256 if gpu_mem > 90 * GIB_MIB else top
