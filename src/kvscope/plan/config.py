"""Deployment configuration the planner reasons about: parallelism and engine flags.

Names mirror the engines' flags (vLLM ``EngineArgs``, SGLang ``ServerArgs``) so a plan
reads like the command line that would run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kvscope.errors import KvscopeError


@dataclass(frozen=True)
class Parallelism:
    """How one replica is split over GPUs, and how many replicas run.

    ``tp`` (``--tensor-parallel-size``), ``pp`` (``--pipeline-parallel-size``), ``dp``
    (``--data-parallel-size``), ``ep`` (``--enable-expert-parallel``: experts are spread
    over tp x dp ranks instead of sharded by TP), ``dp_attention`` (SGLang
    ``--enable-dp-attention``; in vLLM, dp with ep means attention is data-parallel).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False
    dp_attention: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise KvscopeError(f"--{name} must be a positive integer, got {value!r}.")
        if self.dp_attention and self.tp % self.dp:
            raise KvscopeError(
                f"DP attention splits the TP group: --dp {self.dp} must divide --tp {self.tp}.",
                "SGLang runs --tp GPUs with --dp attention groups inside them.",
            )

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def world_size(self) -> int:
        """GPUs in all. SGLang's DP attention splits the TP group instead of adding GPUs."""
        if self.dp_attention:
            return self.tp * self.pp
        return self.tp * self.pp * self.dp

    @property
    def attn_tp(self) -> int:
        """Ranks one attention layer is sharded over: TP, or TP / DP with SGLang DP attention."""
        if self.dp_attention and self.dp > 1:
            return max(1, self.tp // self.dp)
        return self.tp

    @property
    def ep_size(self) -> int:
        """Ranks the experts are spread over (1 when expert parallelism is off)."""
        if not self.ep:
            return 1
        return self.tp if self.dp_attention else self.tp * self.dp


#: Engines the planner models.
ENGINES = ("vllm", "sglang")

#: Engine versions assumed when ``--engine-version`` is not given (the releases the
#: reference notes were read from: vLLM 0.33.0, SGLang 0.5.23).
DEFAULT_ENGINE_VERSION = {"vllm": "0.33.0", "sglang": "0.5.23"}


@lru_cache(maxsize=256)
def parse_version(text: str) -> tuple[int, int, int]:
    """``0.19.1rc2.dev5`` -> ``(0, 19, 1)``; raises :class:`KvscopeError` on nonsense."""
    parts: list[int] = []
    for piece in text.strip().lstrip("v").split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise KvscopeError(
            f"--engine-version '{text}' is not a version number.", "Use a form like 0.19.0."
        )
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


@dataclass(frozen=True)
class EngineConfig:
    """Engine flags that decide memory and scheduling, named after the engines' own flags.

    ``None`` means "not given on the command line": the engine's default applies, which the
    planner resolves per engine and version (:mod:`kvscope.plan.vllm_budget`,
    :mod:`kvscope.plan.sglang_budget`). Units: fractions of total GPU memory, tokens.

    Attributes:
        engine: ``vllm`` or ``sglang``.
        engine_version: release string, e.g. ``0.19.0`` (defaults per engine).
        gpu_memory_utilization: vLLM ``--gpu-memory-utilization`` (default 0.9).
        mem_fraction_static: SGLang ``--mem-fraction-static`` (default depends on GPU and TP).
        max_model_len: ``--max-model-len`` / SGLang ``--context-length``.
        max_num_seqs: ``--max-num-seqs`` / SGLang ``--max-running-requests``.
        max_num_batched_tokens: ``--max-num-batched-tokens`` / SGLang ``--chunked-prefill-size``.
        block_size: ``--block-size`` (vLLM) / ``--page-size`` (SGLang).
        kv_cache_dtype: ``--kv-cache-dtype`` (``auto`` = model dtype).
        enable_prefix_caching: ``--enable-prefix-caching`` (the simulator uses it).
        enforce_eager: ``--enforce-eager``: no CUDA graphs, so no CUDA-graph memory.
        cudagraph_memory: subtract the CUDA-graph estimate from the KV budget: ``None`` = the
            version's default (vLLM >= 0.20 subtracts, earlier ones only log it), True/False
            forces it (vLLM env ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``).
        num_gpu_blocks_override: ``--num-gpu-blocks-override``.
        kv_cache_memory_bytes: vLLM ``--kv-cache-memory-bytes`` (replaces the budget).
        indexer_dtype: DeepSeek V3.2/V4 indexer key cache, ``fp8`` or ``fp4``.
        speculative_layers: MTP draft layers loaded for speculative decoding (their weights).
        flashinfer_sampler: vLLM samples top-k/top-p with FlashInfer (env
            ``VLLM_USE_FLASHINFER_SAMPLER``): ``None`` = the release's default (on in V1 up to
            0.11 when FlashInfer is installed, as in the project's images; opt-in from 0.12).
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
    cudagraph_memory: bool | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None
    indexer_dtype: str = "fp8"
    speculative_layers: int = 0
    flashinfer_sampler: bool | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise KvscopeError(
                f"--engine '{self.engine}' is not modelled.", "Use --engine vllm or sglang."
            )
        for name in ("gpu_memory_utilization", "mem_fraction_static"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 1.0:
                raise KvscopeError(
                    f"--{name.replace('_', '-')} must be in (0, 1], got {value}.",
                    "It is a fraction of the GPU's total memory, e.g. 0.9.",
                )
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise KvscopeError(f"--{name.replace('_', '-')} must be >= 1, got {value}.")
        if self.indexer_dtype not in ("fp8", "fp4"):
            raise KvscopeError(f"indexer dtype must be fp8 or fp4, got '{self.indexer_dtype}'.")
        if self.engine_version is not None:
            parse_version(self.engine_version)

    @property
    def version(self) -> tuple[int, int, int]:
        """The engine release as a comparable tuple."""
        return parse_version(self.engine_version or DEFAULT_ENGINE_VERSION[self.engine])

    @property
    def version_text(self) -> str:
        """The engine release as ``major.minor.patch``."""
        return ".".join(map(str, self.version))
