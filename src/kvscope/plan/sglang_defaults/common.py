"""Types, constants and small helpers shared by the SGLang default rules (see the package)."""

from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, int, int]

#: Oldest release modelled and the newest one read; later releases use the newest rules.
FIRST_MODELLED: Version = (0, 3, 6)
LAST_CHECKED: Version = (0, 5, 23)

GIB_MIB = 1024  # SGLang writes capacities as "N * 1024" MB

#: ``mem_fraction_static`` by TP (0.3.6 - 0.4.6) or TP*PP (0.4.7): (minimum size, fraction).
_TABLE_036 = ((16, 0.79), (8, 0.82), (4, 0.85), (2, 0.87))
_TABLE_040 = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87))


@dataclass(frozen=True)
class SglangDefaults:
    """The three settings as SGLang resolves them, and how.

    ``cuda_graph_max_bs`` is the largest decode batch SGLang captures by default. Where the
    server arguments leave it unset (0.4.6 - 0.5.2 on GPUs above the small-GPU class; the log
    prints ``cuda_graph_max_bs=None``), it is the top of the default capture list and
    ``cuda_graph_max_bs_source`` says ``"capture_list"``. ``chunked_prefill_size`` is -1 when
    chunked prefill is off. ``reserved_mib`` is the memory (MiB) the formula keeps out of the
    static pool when the rule uses one (0.4.6 above 80 GiB, 0.4.7 above 96 GiB, 0.4.8+).
    """

    mem_fraction_static: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    reserved_mib: float | None
    rule: str
    cuda_graph_max_bs_source: str = "server_args"
    prefill_cuda_graph: bool = False
    notes: tuple[str, ...] = ()


@dataclass
class _Args:
    v: Version
    gpu_mem: float | None
    tp: int
    pp: int
    dp: int
    dp_attention: bool
    spec: str | None
    chunked: int | None
    cgmb: int | None
    mfs: float | None
    cuda_graph_bs: tuple[int, ...] | None
    max_prefill_tokens: int
    is_multimodal: bool
    rocm: bool
    vit: tuple[int | None, int | None]
    has_vision_config: bool
    disagg: str
    page_size: int
    notes: list[str]


def _table(size: int, table: tuple[tuple[int, float], ...]) -> float:
    for minimum, fraction in table:
        if size >= minimum:
            return fraction
    return 0.88


def _vlm_factor(vit_num_layers: int | None, vit_hidden_size: int | None) -> float:
    """``adjust_mem_fraction_for_vlm`` (0.4.10+): 0.95 times a clamp on ViT size vs ViT-L/14."""
    layers = 24 if vit_num_layers is None else vit_num_layers
    hidden = 1024 if vit_hidden_size is None else vit_hidden_size
    ratio = layers * hidden**2 / (24 * 1024**2)
    dynamic = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return 0.95 * dynamic


def _need_gpu(a: _Args) -> float:
    if a.gpu_mem is None:
        raise ValueError("this release needs the GPU memory (it fails without nvidia-smi)")
    return a.gpu_mem
