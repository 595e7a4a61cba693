"""SGLang's own defaults for ``mem_fraction_static``, ``chunked_prefill_size`` and the CUDA-graph
batch limit, per release.

A paraphrase (own code, no SGLang code or comments copied) of how SGLang fills these three
settings when the user leaves them unset. Read from the released wheels:

* 0.3.6 - 0.5.2: ``ServerArgs.__post_init__`` (``sglang/srt/server_args.py``); when the server
  arguments leave ``cuda_graph_max_bs`` unset (0.4.6 - 0.5.2 on larger GPUs), the limit comes
  from ``get_batch_sizes_to_capture`` in ``sglang/srt/model_executor/cuda_graph_runner.py``.
* 0.5.3 - 0.5.18: ``ServerArgs._handle_gpu_memory_settings`` (same file), with
  ``_handle_model_specific_adjustments`` (DeepSeek NSA), ``_handle_attention_backend_compatibility``
  (ROCm aiter), ``_handle_data_parallelism`` (DP attention), ``adjust_mem_fraction_for_vlm``,
  the piecewise / prefill CUDA-graph switches (``_handle_piecewise_cuda_graph``,
  0.5.14+ ``_apply_cuda_graph_compatibility``) and 0.5.16+ ``reserve_for_graph_mb``.
* 0.5.19 - 0.5.23: ``handle_gpu_memory_settings`` / ``reserve_for_graph_mb`` /
  ``adjust_mem_fraction_for_vlm`` in ``sglang/srt/arg_groups/memory_hook.py``, the prefill graph
  rules in ``arg_groups/cuda_graph_hook.py``, DP division in ``arg_groups/parallel_hook.py``, the
  aiter factor in ``arg_groups/attention_hook.py`` and the Qwen3-VL decode-graph widening in
  ``arg_groups/model_overrides/qwen3_vl.py``.

GPU memory (``gpu_mem``, MiB) is what ``get_device_memory_capacity`` returns: on CUDA
``get_nvgpu_memory_capacity`` runs ``nvidia-smi --query-gpu=memory.total`` and takes the minimum
over the visible GPUs (nvidia-smi's "FB Memory Usage / Total", e.g. 81559 on an H100 80GB HBM3,
not the ~81090 MiB CUDA reports); on ROCm ``get_amdgpu_memory_capacity`` reads ``rocm-smi
--showmeminfo vram`` total bytes / 2**20 in 0.3.6 and from 0.4.0 the ``rocminfo`` GPU agent's
"Pool 1" size in KB / 1024 (both 196592 MiB on an MI300X). See :func:`sglang_gpu_mem_mib` and
``GPUSpec.memory_smi_mib``.

Release ranges of the ``mem_fraction_static`` rule (``SglangDefaults.rule``):

======================  =====================================================================
0.3.6                   table by TP: 0.88 / 0.87 (tp>=2) / 0.85 (>=4) / 0.82 (>=8) / 0.79 (>=16)
0.4.0 - 0.4.5           same table with 0.81 at tp>=8
0.4.6                   table by TP up to 81920 MiB; above it (gpu_mem - 13 GiB) / gpu_mem
0.4.7                   table by TP*PP up to 81920 MiB, 0.88 above; > 180000 MiB on CUDA: 0.79;
                        > 96 GiB: min(f + 48 GiB (1 - f) / gpu_mem, (gpu_mem - 18|20 GiB) /
                        gpu_mem); otherwise x0.95 with speculative decoding
0.4.8 - 0.5.2           reserved memory by capacity class and p = TP*PP: < 35 GiB 2.8 + p/10,
                        < 90 GiB 9.5 + p/2, < 160 GiB 12 + p/2, else 32 (GiB); +2 GiB speculative
                        (0.5.2: STANDALONE +6), +4 GiB DP attention; round(1 - r / gpu_mem, 3)
0.5.3+                  reserved from the defaults themselves: 512 + 1.5 x max(chunked, 2048)
                        + 2 x cuda_graph_max_bs + TP*PP x 128 (+ DP attention, prefill graphs),
                        at least 10 GiB above 60 GiB, + speculative (0.5.3-0.5.13), + DeepEP
                        (0.5.15+); opt-in post-capture KV sizing (0.5.16+) keeps only the floor
======================  =====================================================================

``chunked_prefill_size`` / ``cuda_graph_max_bs`` when unset ("list" = top of the default capture
list, the server arguments keep None):

======================  =====================================================================
0.3.6                   8192 / 160, both cut to 2048 / 4 under 25000 MiB (even given values)
0.4.0                   8192 / 160; under 25000 MiB 2048 / 8
0.4.1 - 0.4.5           as 0.4.0, small-GPU limit 8 below TP4 and 80 from TP4
0.4.6                   as 0.4.5 under 25000 MiB; else 8192 / list 160 (152 with speculative
                        decoding), 256 above 81920 MiB when dp == 1
0.4.7                   16384 above 180000 MiB or with PD disaggregation, 2048 under 25000 MiB,
                        else 8192 / list 160, 256 above 96 GiB, 512 above 180000 MB
0.4.8 - 0.5.2           2048 under 35 GiB (limit 8 / 80 by TP), 8192 under 160 GiB, else 16384;
                        list 160, 256 above 90 GiB, 512 above 160000 MB; no GPU 4096 / list 160
0.5.3+                  by class: < 20 GiB 2048 / 8; < 35 GiB 2048 / 16 (0.5.5: 24) below TP4,
                        80 from TP4, and from 0.5.20 4096 / 48 or 160; < 60 GiB 4096 / 32 or
                        160; < 160 GiB 8192 / 256 or 512; else 16384 / 512; no GPU 4096 / 160
======================  =====================================================================

DP attention divides the chunk afterwards: by 2 in 0.3.6-0.4.4 (0.3.6-0.4.0 also cap the limit
at 96), by dp from 0.4.5. EAGLE turns chunked prefill off in 0.4.2-0.4.3. From 0.5.3 the reserve
uses the chunk before that division (sgl-project/sglang PR #28884, June 2026, proposed dividing
it; no released wheel read here contains the change).

Boundaries are exact to the minor release: besides the unpacked releases, the wheels of 0.3.5,
0.4.1, 0.4.2, 0.4.4, 0.5.7, 0.5.9, 0.5.11, 0.5.13, 0.5.14, 0.5.16, 0.5.17 and 0.5.19-0.5.22 were
read (there is no 0.5.0 on PyPI); ``.postN`` releases are not told apart.

Later changes inside 0.5.3+: small-GPU decode limit 16 -> 24 (0.5.5) -> 48 with 4k chunks
(0.5.20); EAGLE reserve 2 -> 4 GiB (0.5.10), dropped (0.5.14); piecewise CUDA graph reserve
(opt-in 0.5.6-0.5.9, default on 0.5.10+, the breakable prefill graph from 0.5.15); PD
disaggregation terms (0.5.15); fallback without a GPU 0.88 -> 0.95 (0.5.20); decode limit capped
by ``max_running_requests`` (0.5.22); DP attention uses the attention-DP size (0.5.22, equal to
``dp`` here). Multimodal models: x0.90 (0.4.9), a ViT-size factor (0.4.10+), ``- 8 GiB /
gpu_mem`` under post-capture sizing (0.5.20+). ROCm aiter attention with a model context over
8192 tokens: x0.85 (0.5.5+, also applied to a user-given value). DeepSeek V3.2 (NSA): forced 0.8
and DP attention with dp = tp in 0.5.3; DP attention with dp = tp in 0.5.4-0.5.5 and with the
given dp in 0.5.6-0.5.7; nothing from 0.5.8. Page size enters none of the three numbers (0.4.5-
0.4.9 only assert that it divides ``chunked_prefill_size``).

Not modelled: NPU / HPU / XPU / CPU / MPS branches, MIG (no nvidia-smi value; 0.5.23 then asks
torch), model-specific ``chunked_prefill_size = -1`` overrides (embedding / context-parallel
special models), LoRA / GGUF / torch.compile / HiCache switches of the prefill graph (pass
``prefill_cuda_graph=False``), KV-cache sharding (0.5.23), and the runtime trimming of the capture
list to the request pool (``max_running_requests``) in 0.4.x-0.5.2.

Units: MiB (SGLang's "MB"), as SGLang computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kvscope.plan.sglang_defaults.before_053 import _before_053
from kvscope.plan.sglang_defaults.common import (
    FIRST_MODELLED,
    LAST_CHECKED,
    SglangDefaults,
    Version,
    _Args,
)
from kvscope.plan.sglang_defaults.since_053 import _since_053
from kvscope.specs.hardware import GPUSpec

__all__ = [
    "FIRST_MODELLED",
    "LAST_CHECKED",
    "SglangDefaults",
    "sglang_defaults",
    "sglang_gpu_mem_mib",
]

_SPEC_ALIASES = {"NEXTN": "EAGLE"}


def sglang_gpu_mem_mib(gpu: GPUSpec) -> float | None:
    """What SGLang's ``get_device_memory_capacity`` would read on this GPU (MiB), if known.

    NVIDIA: nvidia-smi ``memory.total``; AMD: the rocm-smi / rocminfo total, which for the
    MI300X equals the HIP-visible total. Both are stored as ``GPUSpec.memory_smi_mib``.
    """
    return None if gpu.memory_smi_mib is None else float(gpu.memory_smi_mib)


def sglang_defaults(
    gpu_mem_mib: float | None,
    version: tuple[int, int, int],
    *,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    dp_attention: bool = False,
    speculative: str | None = None,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    max_prefill_tokens: int = 16384,
    is_multimodal: bool = False,
    rocm: bool = False,
    mem_fraction_static: float | None = None,
    cuda_graph_bs: Sequence[int] | None = None,
    vit_num_layers: int | None = None,
    vit_hidden_size: int | None = None,
    has_vision_config: bool = True,
    mla: bool = False,
    prefill_cuda_graph: bool | None = None,
    piecewise_cuda_graph_max_tokens: int | None = None,
    disable_cuda_graph: bool = False,
    disaggregation_mode: str = "null",
    max_running_requests: int | None = None,
    speculative_num_draft_tokens: int | None = None,
    max_total_tokens: int | None = None,
    context_length: int | None = None,
    model_path: str = "",
    deepep: bool = False,
    deepseek_nsa: bool = False,
    deepseek_v4: bool = False,
    aiter_attention: bool | None = None,
    model_context_len: int | None = None,
    post_capture_kv_sizing: bool = False,
    qwen3_vl_hopper: bool = False,
    page_size: int = 1,
) -> SglangDefaults:
    """SGLang ``version``'s ``mem_fraction_static``, ``chunked_prefill_size`` and decode
    CUDA-graph limit on a GPU whose ``gpu_mem`` is ``gpu_mem_mib`` (MiB, see the module notes).

    Args:
        gpu_mem_mib: nvidia-smi ``memory.total`` (min over GPUs) or the ROCm total, MiB; None
            when SGLang finds no GPU (0.3.6, 0.4.0 and 0.4.6 then crash: ValueError).
        version: release as (major, minor, patch); ``.postN`` releases map to their base.
        tp, pp, dp: tensor / pipeline / data parallel sizes (``dp`` is also the attention-DP
            size under DP attention; 0.3.6-0.4.4 force dp = tp with DP attention).
        dp_attention: ``--enable-dp-attention``. 0.4.5-0.5.1 reject it with dp == 1; 0.5.2-0.5.14
            still count its reserve then (the reset comes later), 0.5.15+ ignore it.
        speculative: ``--speculative-algorithm`` (EAGLE, EAGLE3, NEXTN (= EAGLE), STANDALONE,
            NGRAM, ...) or None.
        chunked_prefill_size, cuda_graph_max_bs, mem_fraction_static: values the user passed
            (None = let SGLang choose). 0.3.6 shrinks even given values on small GPUs; 0.5.3
            NSA and 0.5.5+ aiter override / scale a given ``mem_fraction_static``.
        cuda_graph_bs: ``--cuda-graph-bs`` list; from 0.5.3 its maximum becomes the limit.
        max_prefill_tokens: used for the activation term when chunked prefill is off (0.5.3+).
        is_multimodal: the model config is multimodal (SGLang's ``is_multimodal``) and it is not
            served language-only; ``vit_num_layers`` / ``vit_hidden_size`` are the HF
            ``vision_config`` fields (SGLang's fallbacks 24 / 1024 when None) and
            ``has_vision_config`` False skips the 0.4.10+ ViT factor.
        rocm: AMD GPU (HIP build): changes the 0.4.7 B200 branch, piecewise defaults, aiter.
        mla: the model uses an MLA attention backend (DeepSeek V2/V3, Kimi K2, ...).
        prefill_cuda_graph: force the piecewise (0.5.6+) / prefill (0.5.14+) CUDA graph on or
            off; None = SGLang's automatic choice from the arguments here.
        piecewise_cuda_graph_max_tokens: ``--piecewise-cuda-graph-max-tokens`` (0.5.14+: the
            prefill graph ``max_bs``); None = SGLang's default.
        disable_cuda_graph: ``--disable-cuda-graph`` (drops graph reserves from 0.5.15).
        disaggregation_mode: "null", "prefill" or "decode" (PD disaggregation).
        max_running_requests, speculative_num_draft_tokens: user values; used for the decode
            node's activation term (0.5.15+), the decode limit cap (0.5.22+) and Qwen3-VL.
        max_total_tokens, context_length, model_path: user values that cap the prefill graph
            sizes (0.5.10+; ``context_length`` 0.5.13-0.5.16; "llama-2" in the path: 4096).
        deepep: ``--moe-a2a-backend deepep`` (+2 GiB, 0.5.15+; breakable +1 GiB, 0.5.17+).
        deepseek_nsa: DeepSeek V3.2 / DSA (``is_deepseek_nsa``) model.
        deepseek_v4: DeepSeek V4 model (no breakable prefill graph, 0.5.15+).
        aiter_attention: attention backend resolves to aiter; None = ROCm and not MLA (SGLang
            picks aiter for MHA models on ROCm; for MLA only with 16 or 128 KV heads per rank).
        model_context_len: the model's context length, for the aiter rule (> 8192: x0.85).
        post_capture_kv_sizing: SGLang plans post-capture KV sizing (opt-in through
            ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``, 0.5.16+, CUDA, non-MLA).
        qwen3_vl_hopper: Qwen3-VL(-MoE) on a Hopper GPU (0.5.20+ widens the decode limit to
            ``max_running_requests`` <= 512 on GPUs of 60 GiB or more).
        page_size: only checked (0.4.5-0.4.9 assert it divides ``chunked_prefill_size``).
    """
    if len(version) != 3:
        raise ValueError(f"version must be (major, minor, patch), got {version!r}")
    ver: Version = (int(version[0]), int(version[1]), int(version[2]))
    if ver < FIRST_MODELLED:
        raise ValueError(f"SGLang releases before 0.3.6 are not modelled (got {ver})")
    if min(tp, pp, dp) < 1:
        raise ValueError("tp, pp and dp must be at least 1")
    if disaggregation_mode not in ("null", "prefill", "decode"):
        raise ValueError(f"unknown disaggregation_mode {disaggregation_mode!r}")
    spec = _SPEC_ALIASES.get(speculative.upper(), speculative.upper()) if speculative else None
    gpu_mem = None if gpu_mem_mib is None else float(gpu_mem_mib)
    notes: list[str] = []
    if ver > LAST_CHECKED:
        notes.append(f"release newer than {LAST_CHECKED}: rules of the last one checked")
    args = _Args(
        v=ver,
        gpu_mem=gpu_mem,
        tp=tp,
        pp=pp,
        dp=dp,
        dp_attention=dp_attention,
        spec=spec,
        chunked=chunked_prefill_size,
        cgmb=cuda_graph_max_bs,
        mfs=mem_fraction_static,
        cuda_graph_bs=tuple(cuda_graph_bs) if cuda_graph_bs else None,
        max_prefill_tokens=max_prefill_tokens,
        is_multimodal=is_multimodal,
        rocm=rocm,
        vit=(vit_num_layers, vit_hidden_size),
        has_vision_config=has_vision_config,
        disagg=disaggregation_mode,
        page_size=page_size,
        notes=notes,
    )
    if ver < (0, 5, 3):
        result = _before_053(args)
    else:
        result = _since_053(
            args,
            mla=mla,
            prefill_cuda_graph=prefill_cuda_graph,
            piecewise_max_tokens=piecewise_cuda_graph_max_tokens,
            disable_cuda_graph=disable_cuda_graph,
            max_running_requests=max_running_requests,
            num_draft_tokens=speculative_num_draft_tokens,
            max_total_tokens=max_total_tokens,
            context_length=context_length,
            model_path=model_path,
            deepep=deepep,
            deepseek_nsa=deepseek_nsa,
            deepseek_v4=deepseek_v4,
            post_capture=post_capture_kv_sizing,
            qwen3_vl_hopper=qwen3_vl_hopper,
        )
    mfs = result.mem_fraction_static
    if ver >= (0, 5, 5):
        aiter = rocm and not mla if aiter_attention is None else aiter_attention
        if aiter and model_context_len is not None and model_context_len > 8192:
            mfs *= 0.85
            notes.append("aiter attention, context > 8192: x0.85")
    return replace(result, mem_fraction_static=mfs, notes=tuple(notes))
