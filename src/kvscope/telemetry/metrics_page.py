"""What one engine ``/metrics`` page says, mapped to the catalogue.

The page is parsed with ``prometheus_client.parser`` (the maintained parser of the text
exposition format). Lines of families no engine prefix owns (``process_*``, ``python_gc_*``,
``http_*``) are dropped *before* parsing, which keeps a 10 Hz scrape cheap; every
engine-prefixed family that the catalogue does not know is counted in ``unmapped`` so nothing
disappears silently. Between full pages, :func:`parse_page` with ``full=False`` reads only the
catalogue gauges' sample lines. Values are as the page gives them (base units in the
engines' own exposition: seconds, ratios, counts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from kvscope.errors import KvscopeError
from kvscope.telemetry.catalogue import (
    BY_NAME,
    CACHE_CONFIG_INFO,
    CATALOGUE,
    Aggregate,
    Kind,
    engine_kind,
    lookup,
)
from kvscope.telemetry.windows import HistogramSnapshot

_ENGINE_PREFIXES = ("vllm:", "sglang:", "llamacpp:")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """vLLM's CacheConfig as exposed by ``vllm:cache_config_info`` labels."""

    block_size: int | None
    num_gpu_blocks: int | None
    labels: tuple[tuple[str, str], ...]

    @property
    def capacity_tokens(self) -> int | None:
        if self.block_size is None or self.num_gpu_blocks is None:
            return None
        return self.block_size * self.num_gpu_blocks


@dataclass(frozen=True, slots=True)
class EnginePage:
    """One parsed ``/metrics`` page, already mapped to catalogue names."""

    kind: str | None
    model_name: str | None
    values: dict[str, float]
    histograms: dict[str, HistogramSnapshot]
    cache_config: CacheConfig | None
    resolved_from: dict[str, str]
    unmapped: tuple[str, ...]


def _sample_names(full: bool) -> frozenset[str]:
    """Exposed sample names worth parsing: gauges always; counters, histograms and the
    static ``cache_config_info`` (~40 labels) only on ``full`` scrapes."""
    names = {CACHE_CONFIG_INFO} if full else set()
    for entry in CATALOGUE:
        for src in entry.sources + entry.deprecated:
            if entry.kind is Kind.GAUGE:
                names.add(src)
            elif not full:
                continue
            elif entry.kind is Kind.COUNTER:
                names.update((src, src + "_total"))
            else:
                names.update((src + "_bucket", src + "_sum", src + "_count"))
    return frozenset(names)


_FAST_NAMES = _sample_names(full=False)
_FULL_NAMES = _sample_names(full=True)
#: Sample lines of the gauges (whole lines, name then labels or a space). Anchored on a
#: literal newline rather than ``^`` with ``re.M``: the regex engine then jumps from newline
#: to newline instead of trying every character, which is 4-9x faster on a vLLM page.
_FAST_LINE = re.compile(
    r"\n((?:" + "|".join(re.escape(n) for n in sorted(_FAST_NAMES)) + r")[{ ][^\n]*)"
)
#: Family names whose # HELP / # TYPE lines go with the selected samples.
_FULL_HEADS = _FULL_NAMES | frozenset(
    n.removesuffix("_bucket") for n in _FULL_NAMES if n.endswith("_bucket")
)
_KNOWN_FAMILIES = frozenset(
    n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for n in _FULL_NAMES
)


def _select_lines(text: str) -> tuple[str, tuple[str, ...]]:
    """The page cut down to catalogue families, and the engine families it leaves out.

    A cheap textual pass: the maintained parser then sees only the lines kvscope maps, which
    keeps the full scrape of a 500-line vLLM page cheap (histograms are most of its cost).
    Left-out families are returned by name (from their ``# TYPE`` lines) so nothing
    disappears silently.
    """
    wanted, heads = _FULL_NAMES, _FULL_HEADS
    keep: list[str] = []
    unmapped: list[str] = []
    for line in text.splitlines():
        if line[:1] == "#":
            if not line.startswith("# TYPE "):
                continue  # HELP text is documentation: skipping it halves the comment work
            fam = line[7:].split(" ", 1)[0]
            if fam in heads:
                keep.append(line)
            elif (
                line[2] == "T"
                and fam.startswith(_ENGINE_PREFIXES)
                and fam not in _KNOWN_FAMILIES
                and not fam.endswith("_created")
            ):
                unmapped.append(fam.removesuffix("_total"))
        elif line.split(" ", 1)[0].split("{", 1)[0] in wanted:
            keep.append(line)
    keep.append("")
    return "\n".join(keep), tuple(sorted(set(unmapped)))


def _as_int(text: str | None) -> int | None:
    if text is None or text in ("", "None"):
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def _combine(agg: Aggregate, values: list[float]) -> float:
    if agg is Aggregate.MEAN:
        return sum(values) / len(values)
    if agg is Aggregate.MAX:
        return max(values)
    return sum(values)


def parse_page(text: str, full: bool = True) -> EnginePage:
    """Parse an exposition-format page into catalogue values (raises KvscopeError if malformed).

    With ``full=False`` only the gauges are parsed (the fast path of 10 Hz sampling).
    """
    if not full:
        return _gauge_page(text)
    selected, unmapped_names = _select_lines(text)
    try:
        families = list(text_string_to_metric_families(selected))
    except (ValueError, IndexError, KeyError) as err:
        raise KvscopeError(f"malformed Prometheus text page: {err!r}") from err
    raw: dict[str, list[float]] = {}
    buckets: dict[str, dict[float, float]] = {}
    hsum: dict[str, float] = {}
    hcount: dict[str, float] = {}
    resolved: dict[str, str] = {}
    unmapped: set[str] = set(unmapped_names)
    kind: str | None = engine_kind(unmapped_names[0]) if unmapped_names else None
    model: str | None = None
    cache: CacheConfig | None = None
    for fam in families:
        kind = kind or engine_kind(fam.name)
        if fam.name == CACHE_CONFIG_INFO or fam.name == CACHE_CONFIG_INFO.removesuffix("_info"):
            for s in fam.samples:
                lab = s.labels
                cache = CacheConfig(
                    _as_int(lab.get("block_size")),
                    _as_int(lab.get("num_gpu_blocks")),
                    tuple(sorted(lab.items())),
                )
            continue
        entry = lookup(fam.name)
        if entry is None:
            unmapped.add(fam.name)
            continue
        resolved[entry.name] = fam.name
        for s in fam.samples:
            model = model or s.labels.get("model_name")
            if entry.kind is Kind.HISTOGRAM:
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    b = buckets.setdefault(entry.name, {})
                    b[le] = b.get(le, 0.0) + s.value
                elif s.name.endswith("_sum"):
                    hsum[entry.name] = hsum.get(entry.name, 0.0) + s.value
                elif s.name.endswith("_count"):
                    hcount[entry.name] = hcount.get(entry.name, 0.0) + s.value
            elif entry.kind is Kind.COUNTER:
                if s.name.endswith("_total"):
                    raw.setdefault(entry.name, []).append(s.value)
            elif not s.name.endswith("_created"):
                raw.setdefault(entry.name, []).append(s.value)
    values = {name: _combine(BY_NAME[name].aggregate, vs) for name, vs in raw.items() if vs}
    hists: dict[str, HistogramSnapshot] = {}
    for name, b in buckets.items():
        bounds = tuple(sorted(b))
        counts = tuple(b[x] for x in bounds)
        total = hcount.get(name, counts[-1] if counts else 0.0)
        hists[name] = HistogramSnapshot(bounds, counts, total, hsum.get(name, 0.0))
    return EnginePage(kind, model, values, hists, cache, resolved, tuple(sorted(unmapped)))


_MODEL_LABEL = re.compile(r'[{,]\s*model_name="((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")  # label-value escapes: \\ \" \n


def _gauge_page(text: str) -> EnginePage:
    """The 10 Hz path: the catalogue gauges' values, read straight off their sample lines.

    The full scrape (every ``cumulative_every_s``) runs the whole page through the maintained
    parser; between full scrapes only the gauges' values are needed, and in the exposition
    format a sample line is ``name[{labels}] value [timestamp]``: the value is the first
    field after the label set (label values may hold spaces and braces, numbers may not).
    """
    raw: dict[str, list[float]] = {}
    resolved: dict[str, str] = {}
    kind: str | None = None
    model: str | None = None
    for line in _FAST_LINE.findall("\n" + text):
        brace = line.rfind("}")
        if brace >= 0:
            name, rest = line[: line.index("{")], line[brace + 1 :]
            if model is None and (m := _MODEL_LABEL.search(line, 0, brace + 1)):
                model = _ESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(1))
        else:
            name, _, rest = line.partition(" ")
        try:
            value = float(rest.split(None, 1)[0])
        except (IndexError, ValueError) as err:
            raise KvscopeError(f"malformed Prometheus sample line {line[:80]!r}") from err
        entry = lookup(name)
        if entry is None:  # pragma: no cover - the pattern only matches catalogue gauges
            continue
        kind = kind or engine_kind(name)
        resolved[entry.name] = name
        raw.setdefault(entry.name, []).append(value)
    values = {name: _combine(BY_NAME[name].aggregate, vs) for name, vs in raw.items()}
    return EnginePage(kind, model, values, {}, None, resolved, ())
