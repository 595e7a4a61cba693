"""Find a model by preset id, alias or path: :func:`load_model` and :func:`list_presets`.

Presets are config.json facts (architecture keys only) bundled under ``specs/presets/``, one
file per Hugging Face id (``org--name.json``), each with a ``_kvscope`` block naming the
source of the config and of the published parameter totals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
    name_or_path: str, dtype: str | None = None, quantization: str | None = None
) -> ModelSpec:
    """Load a model spec from a preset id/alias, a config.json path or a model folder.

    ``dtype`` and ``quantization`` are the engines' ``--dtype`` / ``--quantization``.
    Raises :class:`UnknownNameError` (with close matches) when nothing matches.
    """
    if not name_or_path.strip():
        raise KvscopeError(
            "the model name is empty.",
            "Name a preset (see `kvscope models`), a config.json or a model folder.",
        )
    path = local_config(name_or_path)
    if path is not None:
        return parse_config(_read_json(path), str(path), None, dtype, quantization)
    preset = find_preset(name_or_path)
    if preset is None:
        if name_or_path.endswith(".json") or ("/" in name_or_path and Path(name_or_path).suffix):
            raise KvscopeError(f"{_shown(name_or_path)}: no such file.")
        known = [p.id for p in list_presets()]
        known += [p.id.split("/")[-1] for p in list_presets()]
        raise UnknownNameError("model", name_or_path, known)
    return _load_preset(preset, dtype, quantization)


def _shown(name: str) -> str:
    return name if len(name) <= 200 else name[:197] + "..."


def _load_preset(p: Preset, dtype: str | None, quantization: str | None) -> ModelSpec:
    raw = _read_json(p.path)
    return parse_config(raw, f"preset {p.id}", p.id, dtype, quantization, p.published)
