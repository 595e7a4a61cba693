"""Engine flags that ``plan``, ``simulate`` and ``tune`` share beyond the parallel layout: one
spelling and help text each, named as vLLM's ``EngineArgs`` names them.

The values are checked once, by :class:`kvscope.plan.config.EngineConfig` (the one validation
layer for the three commands).
"""

from __future__ import annotations

from typing import Annotated

import typer

EnforceEager = Annotated[
    bool,
    typer.Option("--enforce-eager", help="No CUDA graphs, so no CUDA-graph memory [default: off]."),
]
CudagraphMemory = Annotated[
    bool | None,
    typer.Option(
        "--cudagraph-memory/--no-cudagraph-memory",
        help="Subtract vLLM's CUDA-graph estimate (default: by version, >= 0.20 does).",
    ),
]
MaxCudagraphCaptureSize = Annotated[
    int | None,
    typer.Option(
        "--max-cudagraph-capture-size",
        help="vLLM: largest batch (tokens) captured as a CUDA graph; the graph estimate then "
        "follows the graphs captured [default: min(max-num-seqs x (1 + spec tokens) x 2, 512)].",
    ),
]
ExtensibleKvCache = Annotated[
    bool | None,
    typer.Option(
        "--enable-extensible-kv-cache/--no-enable-extensible-kv-cache",
        help="vLLM 0.34+: size the KV cache from the memory free after CUDA-graph capture "
        "(gpu_memory_utilization then defaults to 1.0) or from the profiling estimate "
        "(0.92) [default: the release's, on from 0.34].",
    ),
]
FlashinferSampler = Annotated[
    bool | None,
    typer.Option(
        "--flashinfer-sampler/--no-flashinfer-sampler",
        help="vLLM samples with FlashInfer (VLLM_USE_FLASHINFER_SAMPLER; default by release).",
    ),
]
KvTransferConfig = Annotated[
    str | None,
    typer.Option(
        "--kv-transfer-config",
        help='vLLM\'s JSON, e.g. \'{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}\' '
        "(LMCacheConnectorV1 only; LMCache's sizes from the LMCACHE_* variables) [default: off].",
    ),
]
DecodeContextParallelSize = Annotated[
    int,
    typer.Option(
        "--decode-context-parallel-size",
        "--dcp",
        help="vLLM: TP ranks that split each request's KV tokens between them (DCP), so the "
        "same memory holds DCP times the tokens; must divide --tp.",
    ),
]
MmEncoderTpMode = Annotated[
    str,
    typer.Option(
        "--mm-encoder-tp-mode",
        help="vLLM, vision-language models: weights shards the vision encoder over TP, data "
        "keeps it whole on every rank.",
    ),
]
DisableCustomAllReduce = Annotated[
    bool,
    typer.Option(
        "--disable-custom-all-reduce",
        help="No custom all-reduce on the TP group (vLLM's and SGLang's flag): only NCCL's "
        "buffers, so less memory outside the KV cache [default: off].",
    ),
]
ColdCompile = Annotated[
    bool,
    typer.Option(
        "--cold-compile",
        help="vLLM: plan a start with no torch.compile cache for this configuration; its "
        "compile's benchmark tensors join the profiling peak [default: off, the cache is warm].",
    ),
]
NoHipblaslt = Annotated[
    bool,
    typer.Option(
        "--no-hipblaslt",
        help="AMD GPUs: PyTorch's GEMMs through rocBLAS (env TORCH_BLAS_PREFER_HIPBLASLT=0), so "
        "vLLM's pool pays for no hipBLASLt libraries (1.72 GiB a GPU) [default: off, hipBLASLt].",
    ),
]
Entrypoint = Annotated[
    str,
    typer.Option(
        "--entrypoint",
        help="How the engine is started: serve (vllm serve, SGLang's server) or offline (vLLM's "
        "LLM() class and vllm bench throughput, whose default token budget is 16384 on "
        "H100-class GPUs and 8192 on others; SGLang's Engine keeps the server's defaults) "
        "[default: serve].",
    ),
]
LanguageModelOnly = Annotated[
    bool,
    typer.Option(
        "--language-model-only",
        help="vLLM 0.17+, vision-language checkpoints: serve the text model alone (no vision "
        "tower weights, no encoder profiling pass) [default: off].",
    ),
]
LimitMmPerPrompt = Annotated[
    str | None,
    typer.Option(
        "--limit-mm-per-prompt",
        help="vLLM, vision-language models: items a prompt may hold, as JSON "
        '(\'{"image": 2, "video": 0}\'); 0 for every modality drops the vision tower '
        "[default: 999 each].",
    ),
]
MambaCacheMode = Annotated[
    str,
    typer.Option(
        "--mamba-cache-mode",
        help="vLLM, attention + linear-attention hybrids (Qwen3-Next, Qwen3.5): state blocks a "
        "request holds: none 1, align 2 (vLLM's pick for these models under "
        "--enable-prefix-caching), all one per block of context [default: none].",
    ),
]
MoeRunnerBackend = Annotated[
    str,
    typer.Option(
        "--moe-runner-backend",
        help="SGLang: the MoE runner (auto, triton, deep_gemm, marlin, flashinfer_mxfp4, ...); "
        "it decides how DeepSeek V4's FP4 experts are stored [default: auto, the release's pick].",
    ),
]
AttentionBackend = Annotated[
    str | None,
    typer.Option(
        "--attention-backend",
        help="vLLM: the attention backend (TRITON_MLA, FLASHINFER, FLASH_ATTN, FLASHMLA, "
        "CUTLASS_MLA, ...; env VLLM_ATTENTION_BACKEND); it sets the block size and buffers.",
        show_default="the engine's automatic choice",
    ),
]
SharedExpertTp1 = Annotated[
    bool,
    typer.Option(
        "--shared-expert-tp1",
        help="SGLang 0.5.12+: every GPU holds the whole MoE shared experts, not 1/TP of them "
        "(env SGLANG_SHARED_EXPERT_TP1=1) [default: off].",
    ),
]
KvCacheDtype = Annotated[
    str | None,
    typer.Option(
        "--kv-cache-dtype",
        help="KV-cache dtype (auto, fp8, fp8_e4m3, ...).",
        show_default="auto, the model dtype",
    ),
]
HbmEfficiency = Annotated[
    float,
    typer.Option("--hbm-efficiency", help="Achievable fraction of HBM bandwidth (kvscope option)."),
]
FlopsEfficiency = Annotated[
    float,
    typer.Option("--flops-efficiency", help="Achievable fraction of peak FLOPS (kvscope option)."),
]
GpuMemoryInUse = Annotated[
    float,
    typer.Option(
        "--gpu-memory-in-use",
        help="GiB other processes already hold on each GPU when the engine starts (nvidia-smi: "
        "a desktop, another server); each engine release handles it its own way [default: 0].",
    ),
]
EnableLora = Annotated[
    bool,
    typer.Option(
        "--enable-lora",
        help="vLLM: reserve LoRA adapter slots on the GPU (--max-loras adapters of "
        "--max-lora-rank), counted with the weights [default: off].",
    ),
]
MaxLoraRank = Annotated[
    int,
    typer.Option("--max-lora-rank", min=1, help="vLLM, with --enable-lora: rank of the slots."),
]
MaxLoras = Annotated[
    int,
    typer.Option("--max-loras", min=1, help="vLLM, with --enable-lora: adapter slots on the GPU."),
]


def lora_rank(enable_lora: bool, max_lora_rank: int) -> int:
    """The slot rank ``EngineConfig`` takes: 0 (no slots) without ``--enable-lora``, as vLLM
    ignores ``--max-lora-rank`` then."""
    return max_lora_rank if enable_lora else 0


def mm_limits(text: str | None) -> tuple[tuple[str, int], ...] | None:
    """``--limit-mm-per-prompt`` parsed at the boundary (one line and exit 2 when bad)."""
    from kvscope.plan.mm_limits import parse_limits

    return None if text is None else parse_limits(text)
