"""The sample record every sampler produces and the store keeps.

A :class:`Sample` is one value of one series at one instant. ``t_s`` is Unix time in seconds
(float, wall clock), ``metric`` a kvscope catalogue name in base units (bytes, seconds, watts,
joules, hertz, degrees Celsius, ratios 0..1, per-second rates), ``source`` the thing measured
(``gpu:0``, ``engine:127.0.0.1:8000``) and ``labels`` extra identity (``pid=4242``) as a sorted
``k=v,k=v`` string so that it can be a column and a Prometheus label set alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """One observation: ``value`` of ``metric`` for ``source`` at Unix time ``t_s``."""

    t_s: float
    source: str
    metric: str
    value: float
    labels: str = ""


def label_string(labels: Mapping[str, str]) -> str:
    """Canonical ``k=v,k=v`` form (sorted keys) of a label mapping; '' when empty."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def parse_label_string(text: str) -> dict[str, str]:
    """Inverse of :func:`label_string` (values may not contain ',' or '=')."""
    if not text:
        return {}
    out: dict[str, str] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        out[key] = value
    return out
