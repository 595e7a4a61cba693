"""Prices per GPU-hour and where each one comes from: :class:`Prices`, :func:`resolve_prices`.

Owns the choice of the USD price per GPU-hour that every cost figure uses. For each GPU the
first of these that names it wins (``flag > file > default``):

1. ``--gpu-hour-price``: one number for every GPU, or ``GPU=PRICE,GPU=PRICE`` (any GPU
   spelling ``kvscope gpus`` accepts);
2. a prices file: ``--prices FILE``, else the per-user default file
   ``$XDG_CONFIG_HOME/kvscope/prices.yaml`` (``~/.config/kvscope/prices.yaml`` when
   ``XDG_CONFIG_HOME`` is unset), when it exists. With ``--provider NAME`` that provider's
   column comes first, then the file's ``gpus`` prices;
3. a ``gpu_hour_usd`` in the GPU's entry of a user GPU file (``--gpu-spec FILE`` or the
   per-user ``gpus.yaml``, :mod:`kvscope.specs.user_gpus`), whose source names that file;
4. kvscope's default estimates, shipped in ``specs/prices.json`` (rounded 2025 on-demand
   prices, not quotes: see that file's ``_note``).

A prices file is YAML (or JSON when it ends in ``.json``)::

    gpus:                 # USD per GPU-hour
      H100: 2.49
      A100-80GB: 1.60
    providers:            # optional; --provider NAME picks one column
      my-cloud:
        H100: 2.10

Every price must be finite, > 0 and at most :data:`MAX_GPU_HOUR_USD`; an unknown GPU name
is one error line with the close matches. Units: USD per GPU-hour.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError, UnknownNameError
from kvscope.specs.hardware import GPUSpec, get_gpu
from kvscope.userconfig import config_dir
from kvscope.validate import finite

#: Highest price taken (USD per GPU-hour): list prices are a few dollars, and a bound keeps
#: $/hour and $/M tokens finite for every GPU count a plan may span.
MAX_GPU_HOUR_USD = 1e6

DEFAULTS_FILE = Path(__file__).resolve().parents[1] / "specs" / "prices.json"

#: What a default price's source says (the basis, e.g. "GPU clouds", is appended).
DEFAULT_SOURCE = "kvscope default estimate"


@dataclass(frozen=True)
class Price:
    """The price of one GPU type and where it comes from (``source``, one phrase)."""

    gpu: str
    usd_per_gpu_hour: float
    source: str


@cache
def default_prices() -> dict[str, Price]:
    """kvscope's default estimate per catalogue GPU name (``specs/prices.json``)."""
    data = json.loads(DEFAULTS_FILE.read_text())
    basis: dict[str, str] = data["basis"]
    as_of = data["as_of"]
    return {
        name: Price(
            name,
            float(entry["usd_per_gpu_hour"]),
            f"{DEFAULT_SOURCE}: {as_of} on-demand, {basis[entry['basis']]}, rounded",
        )
        for name, entry in data["prices"].items()
    }


def check_price(usd: Any, what: str = "--gpu-hour-price") -> float:
    """A price per GPU-hour: a finite number, > 0 and at most :data:`MAX_GPU_HOUR_USD`."""
    x = finite(usd, what)
    if x < 0:
        raise KvscopeError(f"{what} must not be negative, got {usd}.")
    return finite(x, what, low=0.0, low_open=True, high=MAX_GPU_HOUR_USD)


@dataclass(frozen=True)
class Prices:
    """The prices a command was given, in precedence order (see the module docstring).

    ``named``: per-GPU prices from ``--gpu-hour-price GPU=PRICE`` then the prices file,
    first match wins; ``every_gpu``: ``--gpu-hour-price PRICE`` (beats the file, not a named
    flag price); ``defaults``: fall back to kvscope's estimates.
    """

    named_flag: tuple[Price, ...] = ()
    every_gpu: float | None = None
    from_file: tuple[Price, ...] = ()
    defaults: bool = True

    @property
    def overridden(self) -> bool:
        """Whether any price came from the user (flag or file) rather than the defaults."""
        return bool(self.named_flag or self.from_file) or self.every_gpu is not None

    def price(self, gpu: GPUSpec) -> Price | None:
        """The price used for ``gpu``, or None when nothing names it."""
        for p in self.named_flag:
            if p.gpu == gpu.name:
                return p
        if self.every_gpu is not None:
            return Price(gpu.name, self.every_gpu, "--gpu-hour-price")
        for p in self.from_file:
            if p.gpu == gpu.name:
                return p
        if gpu.gpu_hour_usd is not None:
            return Price(gpu.name, gpu.gpu_hour_usd, gpu.origin or "your GPU file")
        return default_prices().get(gpu.name) if self.defaults else None

    def require(self, gpu: GPUSpec) -> Price:
        """:meth:`price`, or one error line saying how to give one."""
        p = self.price(gpu)
        if p is None:
            raise KvscopeError(
                f"no price per GPU-hour for GPU '{gpu.name}'.",
                f"Pass --gpu-hour-price {gpu.name}=USD or add it to a prices file (--prices).",
            )
        return p


def parse_price_flag(text: str) -> Prices:
    """``--gpu-hour-price``: ``2.5`` (every GPU) or ``H100=2.5,A100-80GB=1.6``."""
    flag = "--gpu-hour-price"
    if "=" not in text:
        return Prices(every_gpu=check_price(text.strip(), flag))
    named: dict[str, Price] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise KvscopeError(
                f"{flag}: '{item.strip()}' is not GPU=PRICE.",
                "Write one number, or GPU=PRICE,GPU=PRICE (e.g. H100=2.5,A100-80GB=1.6).",
            )
        gpu = get_gpu(name.strip())
        if gpu.name in named:
            raise KvscopeError(f"{flag}: {gpu.name} is priced twice ('{name.strip()}').")
        usd = check_price(value.strip(), f"{flag} {name.strip()}")
        named[gpu.name] = Price(gpu.name, usd, flag)
    return Prices(named_flag=tuple(named.values()))


def default_prices_file(env: Mapping[str, str] | None = None) -> Path:
    """The per-user prices file: ``$XDG_CONFIG_HOME/kvscope/prices.yaml``, else under
    ``~/.config`` (the XDG Base Directory rule: a relative XDG_CONFIG_HOME is ignored)."""
    return config_dir(env) / "prices.yaml"


def _table(value: Any, where: str) -> dict[str, Price]:
    """A ``GPU: price`` mapping of a prices file, keyed by catalogue name."""
    if not isinstance(value, dict):
        raise KvscopeError(f"{where} must be a mapping of GPU name to USD per GPU-hour.")
    out: dict[str, Price] = {}
    for name, usd in value.items():
        gpu = get_gpu(str(name))
        if gpu.name in out:
            raise KvscopeError(f"{where}: {gpu.name} is priced twice ('{name}').")
        out[gpu.name] = Price(gpu.name, check_price(usd, f"{where}: {name}"), "")
    return out


def load_prices_file(path: str | Path, provider: str | None = None) -> tuple[Price, ...]:
    """The prices of a prices file (see the module docstring), provider column first."""
    from kvscope.validate import load_json, load_yaml

    p = Path(path)
    doc = load_json(p, "prices file") if p.suffix == ".json" else load_yaml(p, "prices file")
    if not isinstance(doc, dict):
        raise KvscopeError(f"{p}: a prices file is a mapping with 'gpus' and/or 'providers'.")
    unknown = sorted(str(k) for k in doc if k not in ("gpus", "providers"))
    if unknown:
        raise KvscopeError(
            f"{p}: unknown key '{unknown[0]}' in the prices file.", "Use 'gpus' and 'providers'."
        )
    label = f"prices file {p}"
    base = _table(doc.get("gpus") or {}, f"{p}: gpus")
    named: dict[str, Price] = {}
    if provider is not None:
        providers = doc.get("providers") or {}
        if not isinstance(providers, dict):
            raise KvscopeError(f"{p}: providers must be a mapping of provider name to prices.")
        if provider not in providers:
            raise UnknownNameError("provider", provider, [str(k) for k in providers])
        named = _table(providers[provider], f"{p}: providers.{provider}")
        label_p = f"{label}, provider {provider}"
        named = {k: Price(k, v.usd_per_gpu_hour, label_p) for k, v in named.items()}
    rest = {k: Price(k, v.usd_per_gpu_hour, label) for k, v in base.items() if k not in named}
    return tuple(named.values()) + tuple(rest.values())


def resolve_prices(
    flag: str | None = None,
    prices_file: str | None = None,
    provider: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Prices:
    """The :class:`Prices` of a command line: ``--gpu-hour-price``, ``--prices``,
    ``--provider`` and the per-user default file, checked here (the boundary)."""
    from_flag = parse_price_flag(flag) if flag is not None else Prices()
    path: Path | None = Path(prices_file) if prices_file is not None else None
    if path is None:
        user = default_prices_file(env)
        path = user if user.is_file() else None
    if path is None:
        if provider is not None:
            raise KvscopeError(
                f"--provider {provider} needs a prices file.",
                f"Pass --prices FILE or write {default_prices_file(env)}.",
            )
        return from_flag
    return Prices(
        named_flag=from_flag.named_flag,
        every_gpu=from_flag.every_gpu,
        from_file=load_prices_file(path, provider),
    )
