"""Deployment configuration the planner reasons about: the engine and its flags
(parallelism: :mod:`kvscope.plan.parallelism`).

Names mirror the engines' flags (vLLM ``EngineArgs``, SGLang ``ServerArgs``) so a plan
reads like the command line that would run it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from kvscope.errors import KvscopeError

# Parallelism lives in its own module; these names stay importable from here.
from kvscope.plan.parallelism import MAX_GPUS as MAX_GPUS
from kvscope.plan.parallelism import MAX_TOKENS as MAX_TOKENS
from kvscope.plan.parallelism import Parallelism as Parallelism
from kvscope.plan.parallelism import check_layout as check_layout
from kvscope.plan.parallelism import resolve_parallel as resolve_parallel
from kvscope.plan.speculative import SpeculativeDecoding
from kvscope.validate import count, finite

if TYPE_CHECKING:
    from kvscope.plan.kv_connector import KvTransfer

#: Engines the planner models.
ENGINES = ("vllm", "sglang")
#: How the engine is started (``--entrypoint``): ``vllm serve`` / SGLang's server, or vLLM's
#: offline ``LLM()`` class / SGLang's ``Engine`` (:mod:`kvscope.plan.vllm_batch_defaults`).
ENTRYPOINTS = ("serve", "offline")
#: vLLM ``--mamba-cache-mode`` values (vllm/config/cache.py ``MambaCacheMode``, v0.24.0)
MAMBA_CACHE_MODES = ("none", "align", "all")

#: ``MOE_RUNNER_BACKEND_CHOICES`` (srt/server_args.py): 0.5.12 has these but
#: ``experimental_sgl_trtllm``, which 0.5.13 and 0.5.14 add.
SGLANG_MOE_RUNNER_BACKENDS = (
    "auto",
    "deep_gemm",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "cutlass",
    "aiter",
    "marlin",
)

#: Engine versions assumed when ``--engine-version`` is not given, and the newest whose rules
#: are modelled (a later ``--engine-version`` plans with a warning). The releases the
#: reference notes were read from: vLLM 0.33.0, SGLang 0.5.23.
DEFAULT_ENGINE_VERSION = {"vllm": "0.33.0", "sglang": "0.5.23"}
#: Newest release whose rules are modelled: vLLM 0.34.0's KV sizing (the extensible KV cache,
#: :mod:`kvscope.plan.vllm_extensible_kv`) and serve defaults were read in its wheel.
NEWEST_MODELLED = {"vllm": "0.34.0", "sglang": DEFAULT_ENGINE_VERSION["sglang"]}


#: First vLLM release that sizes the KV cache after CUDA-graph capture by default
#: (``CacheConfig.enable_extensible_kv_cache``, unset = on for CUDA and ROCm, and
#: ``resolved_gpu_memory_utilization`` 1.0 with it, 0.92 without: vllm/config/cache.py of the
#: 0.34.0 wheel; 0.33.0 has neither).
VLLM_EXTENSIBLE_KV_SINCE = (0, 34, 0)

#: Oldest SGLang release whose rules are modelled (older ones take its rules).
SGLANG_OLDEST_MODELLED = (0, 3, 6)
_ENGINE_NAME = {"vllm": "vLLM", "sglang": "SGLang"}

#: A release string as the engines publish them: up to six digits a component (so a number
#: too long to be a version is refused, not parsed), pre/post/dev tags, a local ``+tag``.
_VERSION = re.compile(
    r"v?(\d{1,6})(?:\.(\d{1,6}))?(?:\.(\d{1,6}))?(?:\.\d{1,6})*"
    r"(?:[.-]?(?:rc|a|b|alpha|beta|post|dev)\d{0,6})*(?:\+[0-9a-z][0-9a-z.]*)?"
)


@lru_cache(maxsize=256)
def parse_version(text: str) -> tuple[int, int, int]:
    """``0.19.1rc2.dev5`` -> ``(0, 19, 1)``; raises :class:`KvscopeError` on nonsense.

    Accepts the forms the engines release (``0.10.1.1``, ``0.6.3.post1``, ``v0.5.3``,
    ``0.11.0+cu128``); anything else (``abc``, ``1..2``, an empty string) is refused rather
    than read as its leading digits.
    """
    m = _VERSION.fullmatch(text.strip().lower())
    if m is None:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise KvscopeError(
            f"--engine-version '{shown}' is not a version number.", "Use a form like 0.19.0."
        )
    major, minor, patch = (int(g) if g else 0 for g in m.groups())
    return (major, minor, patch)


def _version_text(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


@dataclass(frozen=True)
class EngineConfig:
    """Engine flags that decide memory and scheduling, named after the engines' own flags.

    ``None`` means "not given on the command line": the engine's default applies, which the
    planner resolves per engine and version (:mod:`kvscope.plan.vllm_budget`,
    :mod:`kvscope.plan.sglang_budget`). Units: fractions of total GPU memory, tokens.

    Attributes:
        engine: ``vllm`` or ``sglang``.
        engine_version: release string, e.g. ``0.19.0`` (defaults per engine).
        gpu_memory_utilization: vLLM ``--gpu-memory-utilization`` (default by release: 0.9, 0.92
            from 0.20, 1.0 with 0.34's extensible KV cache).
        mem_fraction_static: SGLang ``--mem-fraction-static`` (default depends on GPU and TP).
        max_model_len: ``--max-model-len`` / SGLang ``--context-length``.
        max_num_seqs: ``--max-num-seqs`` / SGLang ``--max-running-requests``.
        max_num_batched_tokens: ``--max-num-batched-tokens`` / SGLang ``--chunked-prefill-size``.
        block_size: ``--block-size`` (vLLM) / ``--page-size`` (SGLang).
        kv_cache_dtype: ``--kv-cache-dtype`` (``auto`` = model dtype).
        enable_prefix_caching: ``--enable-prefix-caching`` (the simulator uses it).
        enforce_eager: ``--enforce-eager``: no CUDA graphs, so no CUDA-graph memory.
        async_scheduling: vLLM ``--async-scheduling`` / ``--no-async-scheduling``: ``None`` =
            the engine's default (on from 0.26 unless PP or an n-gram/suffix drafter turns it
            off); two batches in flight make window groups reserve twice the token budget.
        cudagraph_memory: subtract the CUDA-graph estimate from the KV budget: ``None`` = the
            version's default (vLLM >= 0.20 subtracts, earlier ones only log it), True/False
            forces it (vLLM env ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``).
        max_cudagraph_capture_size: vLLM ``--max-cudagraph-capture-size``: the largest batch
            (tokens) captured as a CUDA graph. Given, the graph estimate follows the number of
            graphs captured (:mod:`kvscope.plan.cudagraph`); ``None`` keeps the H100 fit.
        num_gpu_blocks_override: ``--num-gpu-blocks-override``.
        kv_cache_memory_bytes: vLLM ``--kv-cache-memory-bytes`` (replaces the budget).
        indexer_dtype: DeepSeek V3.2/V4 indexer key cache, ``fp8`` or ``fp4``.
        speculative_layers: MTP draft layers loaded for speculative decoding (their weights);
            kept for callers that give a count, ``speculative`` supersedes it.
        speculative: the parsed ``--speculative-config`` / SGLang ``--speculative-*`` flags
            (:mod:`kvscope.plan.speculative`); its drafter is :mod:`kvscope.plan.drafter`.
        flashinfer_sampler: vLLM samples top-k/top-p with FlashInfer (env
            ``VLLM_USE_FLASHINFER_SAMPLER``): ``None`` = the release's default (on in V1 up to
            0.11 when FlashInfer is installed, as in the project's images; opt-in from 0.12).
        decode_context_parallel_size: vLLM ``--decode-context-parallel-size``: the TP ranks of
            a DCP group each keep 1/DCP of every request's tokens, so the same memory holds
            DCP times the tokens (the logged capacity and concurrency are multiplied by it).
        disable_custom_all_reduce: ``--disable-custom-all-reduce`` (vLLM and SGLang): no
            custom all-reduce buffers, NCCL's only (:mod:`kvscope.plan.vllm_collectives`,
            :func:`kvscope.plan.sglang_budget.context_bytes`).
        mm_encoder_tp_mode: vLLM ``--mm-encoder-tp-mode``: ``weights`` (default) shards a
            vision-language model's encoder over the TP ranks, ``data`` keeps a full copy on
            every rank and splits the images instead
            (:func:`kvscope.plan.weights.encoder_replica_bytes`).
        moe_runner_backend: SGLang ``--moe-runner-backend`` (``auto`` = the release's pick):
            how the MoE runner stores the routed experts
            (:mod:`kvscope.plan.sglang_moe_runner`). vLLM has no such flag.
        shared_expert_tp1: SGLang's ``SGLANG_SHARED_EXPERT_TP1=1`` (0.5.12+): every GPU holds
            the whole MoE shared experts instead of 1/TP of them
            (:mod:`kvscope.plan.sglang_shared_experts`).
        cold_compile: vLLM starts with no torch.compile cache for this configuration, so its
            profiling pass includes Inductor's compile and its benchmark tensors
            (:mod:`kvscope.plan.compile_peak`); ``False`` plans a start that loads the
            compiled graph from the cache. Not an engine flag: the state of the cache folder.
        mamba_cache_mode: vLLM ``--mamba-cache-mode`` of an attention + linear-attention
            hybrid (``none``, ``align``, ``all``): how many state blocks a request holds
            (:mod:`kvscope.plan.kv_layout`). ``none`` is the mode of a hybrid started
            without ``--enable-prefix-caching``; vLLM switches to ``align`` (models without
            'all' support, e.g. Qwen3.5) when prefix caching is requested
            (``MambaModelConfig.verify_and_update_config``, vllm/model_executor/models/
            config.py at v0.24.0).
        gpu_memory_in_use_gib: GiB other processes hold on each GPU when the engine starts
            (``nvidia-smi`` before the server: a desktop, another server); what each engine
            and release does with it is :mod:`kvscope.plan.shared_gpu`. Not an engine flag.
        attention_backend: vLLM ``--attention-backend`` (env ``VLLM_ATTENTION_BACKEND``);
            ``None`` = the engine's automatic choice (:mod:`kvscope.plan.attention_backend`).
        enable_extensible_kv_cache: vLLM 0.34+ ``--[no-]enable-extensible-kv-cache``: size
            the KV cache after CUDA-graph capture; ``None`` = the release's default
            (:mod:`kvscope.plan.vllm_extensible_kv`).
        language_model_only: vLLM 0.17+ ``--language-model-only``: a vision-language
            checkpoint without its vision tower or encoder profiling
            (:mod:`kvscope.plan.language_model_only`).
        limit_mm_per_prompt: vLLM ``--limit-mm-per-prompt`` as (modality, items) pairs;
            ``None`` = 999 each (:mod:`kvscope.plan.mm_limits`).
        entrypoint: how the engine is started: ``serve`` (``vllm serve``, SGLang's server) or
            ``offline`` (vLLM's ``LLM()`` class, ``vllm bench throughput``; SGLang's
            ``Engine``, which takes the server's defaults): vLLM's default token budget
            differs (:mod:`kvscope.plan.vllm_batch_defaults`).
        hipblaslt: ROCm only: PyTorch's GEMMs through hipBLASLt (the default), whose kernel
            libraries vLLM's pool pays for; ``False`` is ``TORCH_BLAS_PREFER_HIPBLASLT=0``
            (rocBLAS) (:mod:`kvscope.plan.rocm_blas`). Not an engine flag: PyTorch's setting.
        chunked_local_hybrid: vLLM keeps Llama 4's chunked-attention layers as their own KV
            groups (env ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``); ``None`` =
            the release's default, ``False`` also stands for ``--disable-hybrid-kv-cache-
            manager`` or a KV connector (:mod:`kvscope.plan.vllm_chunked`).
        kv_transfer: vLLM ``--kv-transfer-config`` with LMCache's settings
            (:mod:`kvscope.plan.kv_connector`); ``None`` = no connector.
        max_lora_rank: vLLM ``--enable-lora --max-lora-rank``: the rank of the adapter slots
            vLLM preallocates (:mod:`kvscope.plan.vllm_lora`); 0 = LoRA off.
        max_loras: vLLM ``--max-loras``: adapter slots on the GPU (default 1).
        use_v1: vLLM's ``VLLM_USE_V1`` (0.8-0.10): ``False`` starts the V0 engine, ``True``
            V1; ``None`` = the release's own choice
            (:func:`kvscope.plan.vllm_v0_fallback.runs_v0`). Not a flag: an environment
            variable, which wrappers such as Unsloth set.
    """

    engine: str = "vllm"
    engine_version: str | None = None
    gpu_memory_utilization: float | None = None
    mem_fraction_static: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    enable_prefix_caching: bool = True
    enforce_eager: bool = False
    async_scheduling: bool | None = None
    cudagraph_memory: bool | None = None
    max_cudagraph_capture_size: int | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None
    indexer_dtype: str = "fp8"
    speculative_layers: int = 0
    flashinfer_sampler: bool | None = None
    speculative: SpeculativeDecoding | None = None
    decode_context_parallel_size: int = 1
    mm_encoder_tp_mode: str = "weights"
    disable_custom_all_reduce: bool = False
    moe_runner_backend: str = "auto"
    shared_expert_tp1: bool = False
    cold_compile: bool = False
    mamba_cache_mode: str = "none"
    gpu_memory_in_use_gib: float = 0.0
    attention_backend: str | None = None
    enable_extensible_kv_cache: bool | None = None
    language_model_only: bool = False
    limit_mm_per_prompt: tuple[tuple[str, int], ...] | None = None
    hipblaslt: bool = True
    chunked_local_hybrid: bool | None = None
    kv_transfer: KvTransfer | None = None
    max_lora_rank: int = 0
    max_loras: int = 1
    use_v1: bool | None = None
    entrypoint: str = "serve"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise KvscopeError(
                f"--engine '{self.engine}' is not modelled.", "Use --engine vllm or sglang."
            )
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise KvscopeError(
                f"--mamba-cache-mode '{self.mamba_cache_mode}' is not a vLLM mode.",
                "Use none, align or all.",
            )
        for name in ("gpu_memory_utilization", "mem_fraction_static"):
            value = getattr(self, name)
            if value is None:
                continue
            flag = f"--{name.replace('_', '-')}"
            if not 0.0 < finite(value, flag) <= 1.0:
                raise KvscopeError(
                    f"{flag} must be in (0, 1], got {value}.",
                    "It is a fraction of the GPU's total memory, e.g. 0.9.",
                )
        self._check_engine_flags()
        from kvscope.plan.attention_backend import check_attention_backend  # imports specs

        check_attention_backend(self.engine, self.version, self.attention_backend)
        if self.max_lora_rank:
            count(self.max_lora_rank, "--max-lora-rank", low=1, high=MAX_TOKENS)
            count(self.max_loras, "--max-loras", low=1, high=MAX_TOKENS)
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            value = getattr(self, name)
            if value is not None:
                count(value, f"--{name.replace('_', '-')}", low=1, high=MAX_TOKENS)
        if self.block_size is not None and self.engine == "vllm":
            _check_vllm_block_size(int(self.block_size))
        if self.max_cudagraph_capture_size is not None:
            count(self.max_cudagraph_capture_size, "--max-cudagraph-capture-size", low=1,
                  high=MAX_TOKENS)  # fmt: skip
        if self.num_gpu_blocks_override is not None:
            count(self.num_gpu_blocks_override, "--num-gpu-blocks-override", low=1)
        if self.kv_cache_memory_bytes is not None:
            count(self.kv_cache_memory_bytes, "--kv-cache-memory-bytes", low=1)
        finite(self.gpu_memory_in_use_gib, "--gpu-memory-in-use", low=0)
        count(self.speculative_layers, "speculative layers", high=MAX_GPUS)
        count(self.decode_context_parallel_size, "--decode-context-parallel-size", low=1,
              high=MAX_GPUS)  # fmt: skip
        if self.entrypoint not in ENTRYPOINTS:
            raise KvscopeError(
                f"--entrypoint must be {' or '.join(ENTRYPOINTS)}, got '{self.entrypoint}'."
            )
        if self.mm_encoder_tp_mode not in ("weights", "data"):
            raise KvscopeError(
                f"--mm-encoder-tp-mode must be weights or data, got '{self.mm_encoder_tp_mode}'."
            )
        if self.moe_runner_backend not in SGLANG_MOE_RUNNER_BACKENDS:
            raise KvscopeError(
                f"--moe-runner-backend must be one of {', '.join(SGLANG_MOE_RUNNER_BACKENDS)}; "
                f"got '{self.moe_runner_backend}'."
            )
        if self.indexer_dtype not in ("fp8", "fp4"):
            raise KvscopeError(f"indexer dtype must be fp8 or fp4, got '{self.indexer_dtype}'.")
        if self.engine_version is not None:
            parse_version(self.engine_version)

    def _check_engine_flags(self) -> None:
        """Refuse a flag the chosen engine does not have: it would be silently ignored."""
        from kvscope.plan.language_model_only import check_language_model_only  # imports this

        check_language_model_only(self)
        if self.shared_expert_tp1:
            # imported here: the module prices weights, which import this one
            from kvscope.plan.sglang_shared_experts import check_shared_expert_tp1

            check_shared_expert_tp1(self.engine, self.version)
        if self.engine == "sglang":
            if self.gpu_memory_utilization is not None:
                raise KvscopeError(
                    "SGLang sizes its pool with --mem-fraction-static; "
                    "--gpu-memory-utilization is vLLM's.",
                    "Pass --mem-fraction-static with --engine sglang.",
                )
            vllm_only = {
                "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
                "num_gpu_blocks_override": "--num-gpu-blocks-override",
                "cudagraph_memory": "--cudagraph-memory/--no-cudagraph-memory",
                "max_cudagraph_capture_size": "--max-cudagraph-capture-size",
                "flashinfer_sampler": "--flashinfer-sampler/--no-flashinfer-sampler",
                "enable_extensible_kv_cache": "--[no-]enable-extensible-kv-cache",
                "kv_transfer": "--kv-transfer-config",
            }
            if self.decode_context_parallel_size > 1:
                raise KvscopeError(
                    "--decode-context-parallel-size is vLLM's flag; SGLang's context "
                    "parallelism is not modelled.",
                    "Drop it with --engine sglang.",
                )
            for name, flag in vllm_only.items():
                if getattr(self, name) is not None:
                    raise KvscopeError(
                        f"{flag} is a vLLM setting; SGLang has no such flag.",
                        "Drop it with --engine sglang (SGLang sizes its pool with "
                        "--mem-fraction-static).",
                    )
            if self.enforce_eager:
                raise KvscopeError(
                    "--enforce-eager is vLLM's; SGLang's is --disable-cuda-graph.",
                    "Drop --enforce-eager with --engine sglang.",
                )
            if self.mm_encoder_tp_mode != "weights":
                raise KvscopeError(
                    "--mm-encoder-tp-mode is vLLM's; SGLang's data-parallel encoder "
                    "(--mm-enable-dp-encoder) is not modelled.",
                    "Drop --mm-encoder-tp-mode with --engine sglang.",
                )
            if self.cold_compile:
                raise KvscopeError(
                    "--cold-compile models vLLM's torch.compile in its profiling pass; "
                    "SGLang does not compile by default and sizes its pool without it.",
                    "Drop --cold-compile with --engine sglang.",
                )
            if self.mamba_cache_mode != "none":
                raise KvscopeError(
                    "--mamba-cache-mode is vLLM's; SGLang keeps its own mamba state pool.",
                    "Drop --mamba-cache-mode with --engine sglang.",
                )
            if self.max_lora_rank:
                raise KvscopeError(
                    "--enable-lora plans vLLM's adapter slots; SGLang's LoRA memory pool "
                    "(--max-loras-per-batch) is not modelled.",
                    "Drop --enable-lora with --engine sglang.",
                )
        elif self.moe_runner_backend != "auto":
            raise KvscopeError(
                "--moe-runner-backend is SGLang's; vLLM picks its MoE kernel itself.",
                "Drop --moe-runner-backend with --engine vllm.",
            )
        elif self.mem_fraction_static is not None:
            raise KvscopeError(
                "vLLM sizes its KV cache with --gpu-memory-utilization; "
                "--mem-fraction-static is SGLang's.",
                "Pass --gpu-memory-utilization with --engine vllm.",
            )
        else:
            from kvscope.plan.vllm_extensible_kv import check_extensible_flag  # imports this

            check_extensible_flag(self)

    def version_warnings(self) -> tuple[str, ...]:
        """A warning when ``engine_version`` lies outside the releases whose rules are read.

        A release newer than the newest one read is planned with that release's rules (its
        defaults may have moved); an SGLang release older than the oldest one read takes the
        oldest one's rules. Empty when the version is within the modelled range.
        """
        if self.engine_version is None:
            return ()
        v, name = self.version, _ENGINE_NAME[self.engine]
        newest = parse_version(NEWEST_MODELLED[self.engine])
        if v > newest:
            return (
                f"{name} {self.engine_version} is newer than the newest release kvscope "
                f"models ({_version_text(newest)}); the rules of {_version_text(newest)} "
                "are used.",
            )
        if self.engine == "sglang" and v < SGLANG_OLDEST_MODELLED:
            oldest = _version_text(SGLANG_OLDEST_MODELLED)
            return (
                f"SGLang {self.engine_version} is older than the oldest release kvscope "
                f"models ({oldest}); the rules of {oldest} are used.",
            )
        return ()

    @property
    def version(self) -> tuple[int, int, int]:
        """The engine release as a comparable tuple."""
        return parse_version(self.engine_version or DEFAULT_ENGINE_VERSION[self.engine])

    @property
    def version_text(self) -> str:
        """The engine release as ``major.minor.patch``."""
        return _version_text(self.version)


def _check_vllm_block_size(block: int) -> None:
    # vLLM's CacheConfig long took only BlockSize = Literal[1, 8, 16, 32, 64, 128] (256 joined
    # for DeepSeek V4; vllm/config/cache.py), and the fixed sizes its CUDA backends require are
    # powers of two too (FlashMLA 64, CUTLASS MLA 128, FlashInfer 16/32/64). Newer releases
    # take any positive size their backend supports (FlashAttention: multiples of 16), so
    # powers of two and multiples of 16 are planned; a size such as 7 or 24 starts on none
    # of them, so no `vllm serve` line with it is ever printed.
    if block & (block - 1) and block % 16:
        raise KvscopeError(
            f"--block-size {block} is neither a power of two nor a multiple of 16; vLLM takes "
            "block sizes such as 8, 16, 32, 64, 128 or 256 tokens.",
            "Use --block-size 16 (vLLM's default).",
        )
