"""Find a model by preset, path or Hugging Face id: :func:`load_model`, :func:`list_presets`.

Resolution order: an existing local config.json or model folder, then a preset id or alias
(case-insensitive), then a Hugging Face id (``org/name``, dots allowed) through the local
Hugging Face cache and the Hub (:mod:`kvscope.specs.hub`). A name shaped like a path that
does not exist is "no such file".

Presets are config.json facts (architecture keys only) bundled under ``specs/presets/``, one
file per Hugging Face id (``org--name.json``), each with a ``_kvscope`` block naming the
source of the config and of the published parameter totals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from kvscope.errors import ConfigError, KvscopeError, UnknownNameError
from kvscope.specs.config_parse import parse_config
from kvscope.specs.model import ModelSpec, Published
from kvscope.validate import read_text

PRESET_DIR = Path(__file__).with_name("presets")


@dataclass(frozen=True)
class Preset:
    """A bundled config: its HF id, the names it answers to, and where its facts come from."""

    id: str
    aliases: tuple[str, ...]
    path: Path
    config_source: str
    published: Published


def _published(meta: dict[str, Any]) -> Published:
    pub = meta.get("published") or {}
    return Published(
        total_params=pub.get("total_params"),
        active_params=pub.get("active_params"),
        active_convention=pub.get("active_convention", "with_embeddings"),
        source=pub.get("source", ""),
    )


@cache
def list_presets() -> tuple[Preset, ...]:
    """All bundled presets, sorted by id."""
    out = []
    for path in sorted(PRESET_DIR.glob("*.json")):
        meta = json.loads(path.read_text()).get("_kvscope", {})
        pid = meta.get("id") or path.stem.replace("--", "/")
        aliases = tuple(a.lower() for a in meta.get("aliases", ()))
        out.append(Preset(pid, aliases, path, meta.get("config_source", ""), _published(meta)))
    return tuple(out)


def find_preset(name: str) -> Preset | None:
    """The preset whose id, short name or alias equals ``name`` (case-insensitive)."""
    key = name.strip().lower()
    for p in list_presets():
        if key in (p.id.lower(), p.id.split("/")[-1].lower(), *p.aliases):
            return p
    return None


class _NonFinite(str):
    """A NaN / Infinity literal met while parsing, kept so its key can be named."""


def _read_json(path: Path) -> dict[str, Any]:
    """A config.json as a mapping: UTF-8, valid JSON, an object, every number finite."""
    text = read_text(path, "model config")
    try:
        data = json.loads(text, parse_constant=_NonFinite)
    except json.JSONDecodeError as err:
        raise KvscopeError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}).") from None
    except RecursionError:
        raise KvscopeError(f"{path}: not a model config (JSON nested too deeply).") from None
    except ValueError:  # an integer literal past Python's 4,300-digit conversion limit
        raise KvscopeError(f"{path}: holds a number too long to be a model size.") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "(top level)", "must be a JSON object")
    bad = _non_finite_key(data)
    if bad is not None:
        key, literal = bad
        raise ConfigError(str(path), key, f"is {literal}, which is not a finite number")
    return data


def _non_finite_key(obj: Any, where: str = "") -> tuple[str, str] | None:
    """(dotted key, literal) of the first NaN / Infinity in ``obj``, or None."""
    if isinstance(obj, _NonFinite):
        return where or "(top level)", str(obj)
    items: Any = ()
    if isinstance(obj, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in obj.items())
    elif isinstance(obj, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(obj))
    for key, value in items:
        found = _non_finite_key(value, key)
        if found is not None:
            return found
    return None


def local_config(name_or_path: str) -> Path | None:
    """The config.json that ``name_or_path`` names on disk (a file or a model folder), or None.

    A name the file system cannot even look up (too long, a NUL byte) is no local path: it
    goes on to the preset lookup, which refuses it in one line.
    """
    path = Path(name_or_path).expanduser()
    try:
        if path.is_dir():
            path = path / "config.json"
            if not path.is_file():
                raise KvscopeError(f"{path.parent}: folder has no config.json.")
        return path if path.is_file() else None
    except (OSError, ValueError):
        return None


def load_model(
    name_or_path: str,
    dtype: str | None = None,
    quantization: str | None = None,
    revision: str | None = None,
) -> ModelSpec:
    """Load a model spec from a config.json path, a model folder, a preset id/alias or a
    Hugging Face id (cache first, then the Hub; config files only).

    ``dtype``, ``quantization`` and ``revision`` are the engines' ``--dtype`` /
    ``--quantization`` / ``--revision``; a revision always reads the Hub id, even one that is
    also a preset. Raises :class:`UnknownNameError` (with close matches) when nothing matches.
    """
    from kvscope.specs import hub  # no huggingface_hub import until a Hub id is met

    if not name_or_path.strip():
        raise KvscopeError(
            "the model name is empty.",
            "Name a preset (see `kvscope models`), a config.json or a model folder.",
        )
    if revision is not None and not revision.strip():
        raise KvscopeError("--revision is empty.", "Name a branch, tag or commit hash.")
    path = local_config(name_or_path)
    if path is not None:
        if revision is not None:
            raise KvscopeError(
                f"--revision applies to Hugging Face ids, not to the local {path}.",
                "Drop --revision, or name the model by its Hub id.",
            )
        spec = parse_config(_read_json(path), str(path), None, dtype, quantization)
        return with_mistral_files(spec, path.parent)
    preset = find_preset(name_or_path) if revision is None else None
    if preset is not None:
        return _load_preset(preset, dtype, quantization)
    if hub.looks_like_path(name_or_path):
        raise KvscopeError(f"{_shown(name_or_path)}: no such file.")
    known = [p.id for p in list_presets()]
    known += [p.id.split("/")[-1] for p in list_presets()]
    if hub.is_hub_id(name_or_path):
        return _load_hub(name_or_path.strip(), revision, dtype, quantization, known)
    raise UnknownNameError("model", name_or_path, known)


def _load_hub(
    repo_id: str,
    revision: str | None,
    dtype: str | None,
    quantization: str | None,
    known: list[str],
) -> ModelSpec:
    """A Hub model's config.json, with a quantization file vLLM would merge into it."""
    from kvscope.specs import hub

    close = UnknownNameError("model", repo_id, known).close_matches
    hint = "presets: close matches " + ", ".join(close) + "." if close else "see `kvscope models`."
    files = hub.fetch_config_files(repo_id, revision, hint)
    raw = _read_json(files.config)
    if not _has_quantization(raw):
        extra = dict(files.quant_files)
        method = (quantization or "").strip().lower()
        if "hf_quant_config.json" in extra:
            raw["quantization_config"] = _modelopt(_read_json(extra["hf_quant_config.json"]))
        elif "quant_config.json" in extra and method in ("awq", "gptq"):
            qc = _read_json(extra["quant_config.json"])
            raw["quantization_config"] = {"quant_method": method, **qc}
    spec = parse_config(raw, str(files.config), repo_id, dtype, quantization)
    return with_mistral_files(spec, files.config.parent)


def with_mistral_files(spec: ModelSpec, folder: Path) -> ModelSpec:
    """``spec`` noting Mistral's own checkpoint files in ``folder`` (a model folder or a cached
    snapshot): ``params.json`` and any ``consolidated*.safetensors``. Files only; nothing read."""
    found = tuple(
        name
        for name, there in (
            ("params.json", (folder / "params.json").is_file()),
            ("consolidated.safetensors", any(folder.glob("consolidated*.safetensors"))),
        )
        if there
    )
    return replace(spec, mistral_files=found) if found else spec


def _has_quantization(raw: dict[str, Any]) -> bool:
    text = raw.get("text_config")
    nested = isinstance(text, dict) and text.get("quantization_config") is not None
    return raw.get("quantization_config") is not None or nested


def _modelopt(qc: dict[str, Any]) -> dict[str, Any]:
    """An ``hf_quant_config.json`` as vLLM reads it: ModelOpt's ``producer`` block names the
    method, ``modelopt`` for FP8 and ``modelopt_fp4`` for NVFP4 (vLLM
    ``ModelConfig._parse_quant_hf_config``)."""
    if "quant_method" in qc:
        return qc
    producer = qc.get("producer")
    if isinstance(producer, dict) and str(producer.get("name", "")).lower() == "modelopt":
        inner = qc.get("quantization")
        algo = str((inner if isinstance(inner, dict) else qc).get("quant_algo", "")).upper()
        return {**qc, "quant_method": "modelopt" if algo == "FP8" else "modelopt_fp4"}
    return qc


def _shown(name: str) -> str:
    return name if len(name) <= 200 else name[:197] + "..."


def _load_preset(p: Preset, dtype: str | None, quantization: str | None) -> ModelSpec:
    raw = _read_json(p.path)
    return parse_config(raw, f"preset {p.id}", p.id, dtype, quantization, p.published)
