"""The shared workload flags and YAML spec files, and the one function that builds a stream.

Flag strings (the same for ``kvscope workload generate``, ``simulate`` and ``bench``):

* ``--arrival KIND:key=value,...``; kinds ``constant:rate=``, ``poisson:rate=``,
  ``gamma:rate=,cv=``, ``spike:base=,peak=,start=,length=``,
  ``ramp:from=,to=,duration=[,curve=linear|exp]``, ``steps:min=,max=,interval=``,
  ``diurnal:mean=,amplitude=[,period=,peak_at=]``, ``onoff:rate=,on=,off=[,base=]``,
  ``concurrency:n=[,think=]``; shapes also take ``cv=``. Sum processes with ``+``:
  ``poisson:rate=5+spike:base=0,peak=50,start=60,length=10``. Times take ``s``/``m``/``h``.
* ``--prompt-len`` / ``--output-len DIST``: a bare number (fixed), ``uniform:min=,max=``,
  ``normal:mean=,std=``, ``lognormal:median=,sigma=`` (or ``mean=`` instead of ``median=``),
  ``mix:0.95@128,0.05@4096`` (a component may be a range ``lo-hi``), ``empirical:FILE``.

Rates are requests/s, times seconds, lengths tokens.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from kvscope import validate
from kvscope.errors import KvscopeError, UnknownNameError
from kvscope.workload import arrivals as A
from kvscope.workload import lengths as L

if TYPE_CHECKING:
    from kvscope.workload.stream import Workload

_TIME = re.compile(r"^([0-9.eE+-]+)\s*(ms|s|m|min|h|d)?$")
_UNIT_S = {None: 1.0, "s": 1.0, "ms": 1e-3, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}

ARRIVAL_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # kind: (required keys, optional keys)
    "constant": (("rate",), ()),
    "poisson": (("rate",), ()),
    "gamma": (("rate", "cv"), ()),
    "spike": (("base", "peak", "start", "length"), ("cv",)),
    "ramp": (("from", "to", "duration"), ("curve", "cv")),
    "steps": (("min", "max", "interval"), ("cv",)),
    "diurnal": (("mean", "amplitude"), ("period", "peak_at", "cv")),
    "onoff": (("rate", "on", "off"), ("base", "cv")),
    "concurrency": (("n",), ("think",)),
}
LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal", "mix", "empirical")
#: Most requests a closed loop may keep in flight (a bound, so a typo such as n=1e30 is one
#: error line rather than a scheduler holding 10**30 slots).
MAX_CONCURRENCY = 1_000_000
#: How far mixture weights may sum from 1 (they are fractions of the requests).
_WEIGHT_SUM_TOLERANCE = 1e-6
_TIME_KEYS = {"start", "length", "duration", "interval", "period", "peak_at", "on", "off", "think"}


def _number(text: str, what: str, key: str) -> float:
    m = _TIME.match(text.strip()) if key in _TIME_KEYS else None
    value: float | str = text.strip()
    if m and _is_float(m.group(1)):  # else ("1e", "+-") finite() names the bad text
        value = float(m.group(1)) * _UNIT_S[m.group(2)]
    # Hand-parsed strings are not covered by the flag parser's NaN/inf refusal.
    try:
        return validate.finite(value, key)
    except KvscopeError:
        raise KvscopeError(f"{what}: '{key}={text}' is not a number.") from None


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _params(
    body: str, what: str, kind: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, str]:
    out: dict[str, str] = {}
    parts = [p for p in body.split(",") if p.strip()] if body else []
    for i, part in enumerate(parts):
        if "=" not in part:
            if i == 0 and len(required) == 1:  # "poisson:10" means rate=10
                out[required[0]] = part.strip()
                continue
            raise KvscopeError(f"{what}: '{part}' should be key=value.")
        k, v = (s.strip() for s in part.split("=", 1))
        if k not in required + optional:
            raise UnknownNameError(f"{kind} parameter", k, required + optional)
        out[k] = v
    missing = [k for k in required if k not in out]
    if missing:
        raise KvscopeError(
            f"{what}: {kind} needs {', '.join(k + '=' for k in missing)}",
            hint=f"e.g. {kind}:" + ",".join(f"{k}=..." for k in required),
        )
    return out


def _positive(value: float, what: str, key: str, allow_zero: bool = False) -> float:
    if value < 0 or (value == 0 and not allow_zero):
        raise KvscopeError(
            f"{what}: '{key}' must be {'>= 0' if allow_zero else '> 0'}, got {value:g}."
        )
    return value


def parse_arrival(text: str) -> A.Process | A.Concurrency:
    """Parse an ``--arrival`` string into an arrival process (or a closed-loop spec)."""
    what = f"--arrival '{text}'"
    parts = [p.strip() for p in text.split("+") if p.strip()]
    if not parts:
        raise KvscopeError(f"{what}: empty.")
    procs = [_one_arrival(p, what) for p in parts]
    if len(procs) == 1:
        return procs[0]
    if any(isinstance(p, A.Concurrency) for p in procs):
        raise KvscopeError(f"{what}: closed-loop concurrency cannot be summed with rates.")
    return A.Sum(tuple(p for p in procs if not isinstance(p, A.Concurrency)))


def _one_arrival(text: str, what: str) -> A.Process | A.Concurrency:
    kind, _, body = text.partition(":")
    kind = kind.strip().lower()
    if kind not in ARRIVAL_KINDS:
        raise UnknownNameError("arrival kind", kind, ARRIVAL_KINDS)
    req, opt = ARRIVAL_KINDS[kind]
    raw = _params(body, what, kind, req, opt)
    v = {k: _number(s, what, k) for k, s in raw.items() if k != "curve"}
    cv = _positive(v.get("cv", 1.0), what, "cv", allow_zero=True)
    pos = {
        k: _positive(
            x,
            what,
            k,
            allow_zero=k
            in ("base", "start", "peak_at", "amplitude", "min", "think", "from", "off"),
        )
        for k, x in v.items()
        if k != "cv"
    }
    if kind == "constant":
        return A.Constant(pos["rate"])
    if kind == "poisson":
        return A.Renewal(pos["rate"], 1.0)
    if kind == "gamma":
        return A.Renewal(pos["rate"], cv)
    if kind == "spike":
        return A.Spike(pos["base"], pos["peak"], pos["start"], pos["length"], cv)
    if kind == "ramp":
        curve = raw.get("curve", "linear")
        if curve not in ("linear", "exp"):
            raise UnknownNameError("ramp curve", curve, ("linear", "exp"))
        if curve == "exp" and pos["from"] == 0:
            raise KvscopeError(f"{what}: an exponential ramp needs from= > 0.")
        return A.Ramp(pos["from"], pos["to"], pos["duration"], curve, cv)
    if kind == "steps":
        if pos["max"] < pos["min"]:
            raise KvscopeError(f"{what}: steps needs min <= max.")
        return A.Steps(pos["min"], pos["max"], pos["interval"], cv)
    if kind == "diurnal":
        if pos["amplitude"] > 1:
            raise KvscopeError(f"{what}: diurnal amplitude is a fraction of the mean, 0..1.")
        return A.Diurnal(
            pos["mean"], pos["amplitude"], pos.get("period", 86_400.0), pos.get("peak_at", 0.0), cv
        )
    if kind == "onoff":
        return A.OnOff(pos["rate"], pos["on"], pos["off"], pos.get("base", 0.0), cv)
    n = pos["n"]
    if not n.is_integer():
        raise KvscopeError(f"{what}: concurrency n must be a whole number.")
    return A.Concurrency(
        validate.count(n, f"{what}: 'n'", low=1, high=MAX_CONCURRENCY), pos.get("think", 0.0)
    )


def inside_spec_folder(spec_file: Path, name: str) -> Path:
    """The file ``name`` that ``spec_file`` refers to, refused unless it lies in the spec's folder.

    A workload spec is a file people share; one that could name any local file
    (``empirical:/etc/shadow``) would read it with the runner's rights. So a file named
    *inside* a spec must resolve (symlinks followed) under the spec's own folder; files given
    on the command line are the user's own choice and are not confined.
    """
    folder = spec_file.parent.resolve()
    path = Path(name).expanduser()
    target = (path if path.is_absolute() else folder / path).resolve()
    if target != folder and folder not in target.parents:
        raise KvscopeError(
            f"{spec_file}: the spec names a file outside its own folder ({name}); "
            "pass it on the command line instead."
        )
    return target


def parse_length(
    text: str,
    *,
    column: str = "prompt",
    base_dir: Path | None = None,
    spec_file: Path | None = None,
) -> L.LengthDist:
    """Parse a ``--prompt-len``/``--output-len`` string; ``column`` picks the empirical column.

    ``spec_file``: the YAML spec the string came from; an ``empirical:FILE`` is then relative
    to the spec's folder and must lie inside it (:func:`inside_spec_folder`).
    """
    what = f"length '{text}'"
    s = text.strip()
    if re.fullmatch(r"\d+", s):
        return L.Fixed(_int_len(s, what))
    kind, _, body = s.partition(":")
    kind = kind.lower()
    if kind not in LENGTH_KINDS:
        raise UnknownNameError("length distribution", kind, LENGTH_KINDS)
    if kind == "fixed":
        return L.Fixed(_int_len(body, what))
    if kind == "empirical":
        return _empirical(body, column, base_dir, spec_file, what)
    if kind == "mix":
        return _mix(body, what)
    if kind == "uniform":
        p = _params(body, what, kind, ("min", "max"), ())
        lo, hi = _int_len(p["min"], what), _int_len(p["max"], what)
        if hi < lo:
            raise KvscopeError(f"{what}: uniform needs min <= max.")
        return L.Uniform(lo, hi)
    if kind == "normal":
        p = _params(body, what, kind, ("mean", "std"), ())
        return L.Normal(_tokens(p["mean"], what, "mean"), _tokens(p["std"], what, "std", True))
    p = _params(body, what, kind, ("sigma",), ("median", "mean"))
    # exp(sigma * z) overflows past sigma ~ 700/z; 10 is already a spread of e^10 per sigma.
    sigma = validate.finite(_number(p["sigma"], what, "sigma"), f"{what}: 'sigma'", low=0, high=10)
    if ("median" in p) == ("mean" in p):
        raise KvscopeError(f"{what}: lognormal needs exactly one of median= or mean=.")
    if "median" in p:
        median = _tokens(p["median"], what, "median")
    else:  # mean = median * exp(sigma^2 / 2) for a log-normal
        median = _tokens(p["mean"], what, "mean") * math.exp(-(sigma**2) / 2)
    return L.LogNormal(median, sigma)


def _tokens(text: str, what: str, key: str, allow_zero: bool = False) -> float:
    """A length parameter in tokens: finite, > 0 (or >= 0), at most MAX_TOKENS."""
    value = _positive(_number(text, what, key), what, key, allow_zero)
    return validate.finite(value, f"{what}: '{key}'", high=L.MAX_TOKENS)


def _int_len(text: str, what: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise KvscopeError(f"{what}: '{text}' is not a whole number of tokens.") from None
    if value < 1:
        raise KvscopeError(f"{what}: lengths must be >= 1 token, got {value}.")
    if value > L.MAX_TOKENS:
        raise KvscopeError(f"{what}: lengths must be <= {L.MAX_TOKENS:,} tokens.")
    return value


def _mix(body: str, what: str) -> L.Mix:
    comps: list[tuple[float, int, int]] = []
    for part in (p.strip() for p in body.split(",") if p.strip()):
        m = re.fullmatch(r"([0-9.eE+-]+)@(\d+)(?:-(\d+))?", part)
        if not m:
            raise KvscopeError(
                f"{what}: mix component '{part}' should be WEIGHT@LEN or WEIGHT@LO-HI.",
                hint="e.g. mix:0.95@128,0.05@4096",
            )
        w = _positive(_number(m.group(1), what, "weight"), what, "weight")
        if w > 1:
            raise KvscopeError(
                f"{what}: mix weight {w:g} is not a fraction; weights are in (0, 1] and add "
                "up to 1.",
                hint="e.g. mix:0.95@128,0.05@4096",
            )
        lo = _int_len(m.group(2), what)
        hi = _int_len(m.group(3), what) if m.group(3) else lo
        if hi < lo:
            raise KvscopeError(f"{what}: range {lo}-{hi} is reversed.")
        comps.append((w, lo, hi))
    if not comps:
        raise KvscopeError(f"{what}: mix needs at least one WEIGHT@LEN component.")
    total = math.fsum(c[0] for c in comps)
    if abs(total - 1.0) > _WEIGHT_SUM_TOLERANCE:
        raise KvscopeError(
            f"{what}: mix weights are fractions of the requests and must add up to 1, "
            f"not {total:g}.",
            hint="e.g. mix:0.95@128,0.05@4096",
        )
    return L.Mix(tuple(comps))


def _empirical(
    body: str, column: str, base_dir: Path | None, spec_file: Path | None, what: str
) -> L.Empirical:
    from kvscope.workload.traces.detect import load_trace

    if not body:
        raise KvscopeError(f"{what}: empirical needs a file, e.g. empirical:trace.csv.")
    path = Path(body).expanduser()
    if spec_file is not None:
        path = inside_spec_folder(spec_file, body)
    elif base_dir is not None and not path.is_absolute():
        path = base_dir / path
    w = load_trace(path)
    values = w.prompt_tokens if column == "prompt" else w.output_tokens
    values = values[values >= 1]
    if len(values) == 0:
        raise KvscopeError(f"{what}: {path} has no {column} lengths to resample.")
    return L.Empirical(values, str(path))


def build_workload(
    workload: str | None = None,
    arrival: str | None = None,
    prompt_len: str | None = None,
    output_len: str | None = None,
    duration_s: float | None = None,
    num_requests: int | None = None,
    speedup: float | None = None,
    seed: int | None = None,
    max_model_len: int | None = None,
    *,
    fmt: str | None = None,
    skip_bad: bool = False,
) -> Workload:
    """The stream the shared workload flags describe (see :mod:`kvscope.workload.build`)."""
    from kvscope.workload.build import build_workload as _build

    return _build(
        workload,
        arrival,
        prompt_len,
        output_len,
        duration_s,
        num_requests,
        speedup,
        seed,
        max_model_len,
        fmt=fmt,
        skip_bad=skip_bad,
    )
