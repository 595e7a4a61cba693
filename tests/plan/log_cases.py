"""Real engine start-up logs (tests/plan/data/engine_logs*.csv) and the planner's error on them.

Each row holds the configuration of one public engine start and the figures its log printed
(weights GiB, available KV GiB, KV tokens, max concurrency), with the source. This module
turns a row into planner inputs and compares; ``test_memory.py`` asserts the targets and
``benchmarks/plan_accuracy.py`` prints the table.

A row names its model by the Hugging Face id the log shows. Ids that are not bundled presets
resolve, as a user's would, through a Hugging Face cache folder: :func:`hub_cache` lays one
out the way ``huggingface_hub`` does (``models--org--name/refs/main`` holding a commit,
``snapshots/<commit>/config.json``, plus an empty file for each name an entry's ``files``
lists: other files the repository has, such as Mistral's ``params.json``) from
``data/hub_ids.json``, and planning reads it with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import json
import os
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_connector import KvTransfer
from kvscope.plan.memory import MemoryPlan, plan_memory
from kvscope.plan.speculative import SpeculativeDecoding, from_sglang, parse_vllm
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

DATA = Path(__file__).with_name("data")
CSV_PATH = DATA / "engine_logs.csv"
#: Every log table: ``engine_logs.csv`` plus topical ones (``engine_logs_deepseek.csv``), all
#: with the columns of the first; a column a file lacks reads as empty.
CSV_GLOB = "engine_logs*.csv"
HUB_IDS = DATA / "hub_ids.json"
SPECS_CONFIGS = Path(__file__).parents[1] / "specs" / "data" / "configs"


def hub_ids() -> dict[str, Any]:
    """``data/hub_ids.json``, refusing a repeated id (a second entry would silently win)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"{HUB_IDS.name} repeats {', '.join(dup)}")
        return dict(pairs)

    return dict(json.loads(HUB_IDS.read_text(), object_pairs_hook=unique))


def hub_config(repo_id: str) -> dict[str, object]:
    """The config.json that ``repo_id`` has in the test cache (see ``data/hub_ids.json``)."""
    entry = hub_ids()[repo_id]
    ref = str(entry["config"])
    if ref.startswith("preset:"):
        from kvscope.specs.registry import PRESET_DIR

        raw = json.loads((PRESET_DIR / (ref[7:].replace("/", "--") + ".json")).read_text())
        raw.pop("_kvscope", None)
    elif ref.startswith("specs:"):
        raw = json.loads((SPECS_CONFIGS / ref[6:]).read_text())
    else:
        raw = json.loads((DATA / ref).read_text())
    raw.update(entry.get("merge", {}))
    return dict(raw)


@cache
def hub_cache() -> Path:
    """A Hugging Face hub cache folder holding every id of ``data/hub_ids.json``, laid out as
    ``huggingface_hub`` lays it out; the commit of each snapshot is the SHA-1 of its file."""
    root = Path(tempfile.mkdtemp(prefix="kvscope-hub-cache-")) / "hub"
    for repo_id in hub_ids():
        if repo_id.startswith("_"):
            continue
        text = json.dumps(hub_config(repo_id), indent=1)
        commit = hashlib.sha1(text.encode()).hexdigest()
        repo = root / ("models--" + repo_id.replace("/", "--"))
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text(text)
        for name in hub_ids()[repo_id].get("files", []):  # other files the repository has
            (repo / "snapshots" / commit / name).write_text("")
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
    return root


@contextlib.contextmanager
def offline_hub() -> Iterator[Path]:
    """The test cache as ``HF_HUB_CACHE``, with ``HF_HUB_OFFLINE=1``, for the block's span."""
    keys = ("HF_HUB_CACHE", "HF_HUB_OFFLINE")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["HF_HUB_CACHE"] = str(hub_cache())
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield hub_cache()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass(frozen=True)
class Case:
    row: dict[str, str]

    @property
    def id(self) -> str:
        return self.row["id"]

    def num(self, key: str) -> float | None:
        value = self.row[key].strip()
        return float(value) if value else None

    def opt_int(self, key: str) -> int | None:
        value = self.num(key)
        return None if value is None else int(value)

    def plan(
        self,
        kv_cache_memory_bytes: int | None = None,
        max_cudagraph_capture_size: int | None = None,
        kv_transfer: KvTransfer | None = None,
    ) -> MemoryPlan:
        r = self.row
        if kv_cache_memory_bytes is None:
            kv_cache_memory_bytes = self.opt_int("kv_cache_memory_bytes")
        name = r["model"]
        if name.startswith("configs/"):
            name = str(DATA / name)
        with offline_hub():
            model = load_model(name, r["dtype"] or None, r["quantization"] or None)
        par = Parallelism(
            tp=int(r["tp"]),
            pp=int(r["pp"]),
            dp=int(r["dp"]),
            ep=r["ep"] == "1",
            dp_attention=r["dp_attention"] == "1",
        )
        eng = EngineConfig(
            engine=r["engine"],
            engine_version=r["version"],
            gpu_memory_utilization=self.num("gpu_memory_utilization"),
            mem_fraction_static=self.num("mem_fraction_static"),
            max_model_len=self.opt_int("max_model_len"),
            max_num_batched_tokens=self.opt_int("max_num_batched_tokens"),
            max_num_seqs=self.opt_int("max_num_seqs"),
            block_size=self.opt_int("block_size"),
            kv_cache_dtype=r["kv_cache_dtype"] or None,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            speculative_layers=self.opt_int("mtp_layers") or 0,
            flashinfer_sampler=_opt_bool(r.get("flashinfer_sampler", "")),
            speculative=_speculative(r, model),
            enforce_eager=_opt_bool(r.get("enforce_eager", "")) or False,
            num_gpu_blocks_override=self.opt_int("num_gpu_blocks_override"),
            decode_context_parallel_size=self.opt_int("decode_context_parallel_size") or 1,
            mm_encoder_tp_mode=r.get("mm_encoder_tp_mode", "") or "weights",
            max_cudagraph_capture_size=max_cudagraph_capture_size,
            disable_custom_all_reduce=_opt_bool(r.get("disable_custom_all_reduce", "")) or False,
            moe_runner_backend=r.get("moe_runner_backend", "") or "auto",
            shared_expert_tp1=_opt_bool(r.get("shared_expert_tp1", "")) or False,
            cold_compile=_opt_bool(r.get("cold_compile", "")) or False,
            async_scheduling=_opt_bool(r.get("async_scheduling", "")),
            mamba_cache_mode=r.get("mamba_cache_mode", "") or "none",
            language_model_only=_opt_bool(r.get("language_model_only", "")) or False,
            enable_prefix_caching=_opt_bool(r.get("enable_prefix_caching", "")) is not False,
            gpu_memory_in_use_gib=self.num("gpu_memory_in_use_gib") or 0.0,
            attention_backend=r.get("attention_backend", "") or None,
            indexer_dtype=r.get("indexer_dtype", "") or "fp8",
            hipblaslt=_opt_bool(r.get("hipblaslt", "")) is not False,
            kv_transfer=kv_transfer,
            max_lora_rank=self.opt_int("max_lora_rank") or 0,
            max_loras=self.opt_int("max_loras") or 1,
            use_v1=_opt_bool(r.get("vllm_use_v1", "")),
            entrypoint=r.get("entrypoint", "") or "serve",
        )
        gpu = get_gpu(r["gpu"])
        # The CUDA total the log itself prints ("Free memory on device (free/total GiB)"),
        # where the host reports another figure than the catalogue's Linux one (WSL2 and
        # Windows drivers report the whole framebuffer, nvidia-smi's total).
        total = self.num("gpu_memory_total_gib")
        if total:
            gpu = dataclasses.replace(gpu, memory_bytes=int(total * GIB))
        with offline_hub():  # a draft named by its Hub id resolves through the same cache
            return plan_memory(model, gpu, par, eng)


def _speculative(row: dict[str, str], model: ModelSpec) -> SpeculativeDecoding | None:
    """The row's ``speculative_config``: vLLM's JSON, or for SGLang a JSON object of its
    flags (``algorithm``, ``num_steps``, ``eagle_topk``, ``num_draft_tokens``,
    ``draft_model_path``), read by the same parser the CLI uses. A draft named by a local
    folder of the logged host stands for the config file ``hub_ids.json`` maps it to
    (``_local_drafts``), as a user would point ``kvscope plan`` at that folder."""
    spec = _parsed_speculative(row, model)
    drafts = hub_ids().get("_local_drafts", {})
    if spec is not None and spec.model in drafts:
        spec = dataclasses.replace(spec, model=str(DATA / drafts[spec.model]))
    return spec


def _parsed_speculative(row: dict[str, str], model: ModelSpec) -> SpeculativeDecoding | None:
    text = (row.get("speculative_config") or "").strip()
    if not text:
        return None
    if row["engine"] == "sglang":
        doc = json.loads(text)
        return from_sglang(
            doc["algorithm"],
            doc.get("num_steps"),
            doc.get("eagle_topk"),
            doc.get("num_draft_tokens"),
            doc.get("draft_model_path"),
            deepseek_like=model.num_mtp_layers > 0,
            dspark_block_size=model.dspark_block_size,
        )
    return parse_vllm(text)


def _opt_bool(value: str | None) -> bool | None:
    value = (value or "").strip()
    return None if not value else value == "1"


def load_cases() -> list[Case]:
    """Rows of every ``engine_logs*.csv`` (sorted by file name), ids unique across files."""
    cases: list[Case] = []
    for path in sorted(DATA.glob(CSV_GLOB)):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                cases.append(Case({k: (v or "") for k, v in row.items() if k is not None}))
    columns = set().union(*(c.row for c in cases))
    cases = [Case({**dict.fromkeys(columns, ""), **c.row}) for c in cases]
    ids = [c.id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"duplicate engine-log ids: {', '.join(dup)}")
    return cases


def case_by_id(case_id: str) -> Case:
    """The row ``case_id`` of :func:`load_cases` (KeyError when no row has that id)."""
    found = {c.id: c for c in load_cases()}
    return found[case_id]


def rel_err(pred: float, actual: float) -> float:
    return abs(pred - actual) / actual


@dataclass(frozen=True)
class Result:
    case: Case
    weights_err: float | None
    tokens_err: float | None
    tokens_from_available_err: float | None
    predicted_tokens: int
    predicted_weights_gib: float
    kv_gib_err: float | None = None


def evaluate(case: Case) -> Result:
    plan = case.plan()
    weights = case.num("weights_gib")
    tokens = case.num("kv_tokens")
    w_err = rel_err(plan.weights_gib, weights) if weights else None
    t_err = rel_err(plan.kv_tokens, tokens) if tokens else None
    avail = case.num("kv_cache_gib")
    a_err = None
    if avail and tokens and case.row["engine"] == "vllm":
        from_avail = case.plan(kv_cache_memory_bytes=int(avail * GIB))
        a_err = rel_err(from_avail.kv_tokens, tokens)
    kv_err = rel_err(plan.kv_cache_gib, avail) if avail else None
    return Result(case, w_err, t_err, a_err, plan.kv_tokens, plan.weights_gib, kv_err)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank-free linear percentile (q in [0, 100])."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


#: The architecture families of issue 17 item 2, by the language model's ``model_type``.
FAMILY_OF_TYPE = {
    "llama": "llama",
    "mistral": "mistral",
    "mixtral": "mixtral",
    "qwen2": "qwen2",
    "qwen2_moe": "qwen2_moe",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
    "qwen3_next": "qwen3-next/3.5",
    "qwen3_5": "qwen3-next/3.5",
    "qwen3_5_moe": "qwen3-next/3.5",
    "qwen3_5_text": "qwen3-next/3.5",
    "gemma2": "gemma2/gemma3",
    "gemma3_text": "gemma2/gemma3",
    "gemma4_text": "gemma4",
    "llama4_text": "llama4",
    "glm4_moe": "glm4_moe",
    "minimax_m2": "minimax_m2",
    "gpt_oss": "gpt_oss",
    "phi3": "phi3",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "deepseek_v32": "deepseek",
    "kimi_k2": "deepseek",
    "glm_moe_dsa": "glm-5",
    "kimi_linear": "kimi-linear/k3",
}


@dataclass(frozen=True)
class Tags:
    """How one row is grouped in the accuracy breakdown."""

    model_type: str
    family: str  # an item-2 family, or "other (<model_type>)"
    vision: bool  # a vision-language wrapper (its tower counted)
    deepseek_v3_plus: bool  # DeepSeek V3 / V3.2 / V4 (and Kimi K2, a V3 derivative)
    speculative: bool
    release_group: str
    gpu: str


def tags(case: Case) -> Tags:
    """Family, release group and the other acceptance labels of ``case``'s row."""
    r = case.row
    with offline_hub():
        spec = load_model(r["model"])
    mt = spec.model_type
    fam = "deepseek" if mt.startswith("deepseek_v4") else FAMILY_OF_TYPE.get(mt, f"other ({mt})")
    v = tuple(int(p) for p in r["version"].split(".")[:3] if p.isdigit())
    if r["engine"] == "vllm":
        group = (
            "vLLM V0 (< 0.8)" if v < (0, 8) else
            "vLLM 0.8-0.11" if v < (0, 12) else
            "vLLM 0.12-0.19" if v < (0, 20) else
            "vLLM >= 0.20"
        )  # fmt: skip
    else:
        group = "SGLang < 0.5" if v < (0, 5) else "SGLang >= 0.5"
    spec_flags = (r.get("speculative_config") or "").strip() or (r.get("mtp_layers") or "").strip()
    return Tags(
        model_type=mt,
        family=fam,
        vision=spec.vision_params > 0,
        deepseek_v3_plus=mt in ("deepseek_v3", "deepseek_v32", "kimi_k2")
        or mt.startswith("deepseek_v4"),
        speculative=bool(spec_flags) and spec_flags != "0",
        release_group=group,
        gpu=get_gpu(r["gpu"]).name,
    )
