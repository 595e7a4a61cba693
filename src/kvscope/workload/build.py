"""Build a workload from the shared flags or a YAML spec file (the one entry point).

``build_workload`` is what ``kvscope workload generate``, ``kvscope simulate`` and
``kvscope bench`` call with their ``--workload --arrival --prompt-len --output-len --duration
--num-requests --speedup --seed`` values, so all three see the same stream for the same flags.

A YAML spec file (``--workload spec.yaml``) holds the same fields plus sessions and trace
transforms; flags given on the command line override the file::

    arrival: poisson:rate=2          # session starts when sessions: is present
    prompt_len: lognormal:median=200,sigma=0.6
    output_len: 150
    num_requests: 2000
    seed: 7
    sessions: {turns: "uniform:min=2,max=6", think_time_s: 20,
               system_prompt_tokens: 1200, system_prompts: 4, block_size: 16}
    # or replay a trace (path relative to this file) with transforms:
    # trace: ../traces/conv.csv
    # window_s: [600, 1200]
    # rate: 20          # rescale to this mean rate (req/s)
    # sample: 0.5       # keep this fraction, seeded
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvscope.errors import ConfigError, KvscopeError
from kvscope.validate import INT64_MAX, count, finite, load_yaml
from kvscope.workload import arrivals as A
from kvscope.workload.lengths import MAX_TOKENS, LengthDist
from kvscope.workload.limits import check_request_count
from kvscope.workload.sessions import DEFAULT_BLOCK_SIZE, SessionSpec, generate_sessions
from kvscope.workload.spec import inside_spec_folder, parse_arrival, parse_length
from kvscope.workload.stream import Workload

#: Defaults when no length flag is given: vLLM's random dataset defaults
#: (``--random-input-len 1024``, ``--random-output-len 128``, vllm/benchmarks/datasets).
DEFAULT_PROMPT_LEN = "1024"
DEFAULT_OUTPUT_LEN = "128"
#: Most distinct shared system prompts a session spec may ask for.
MAX_SYSTEM_PROMPTS = 1_000_000


class _SessionsModel(BaseModel):
    # allow_inf_nan=False: `.nan` / `.inf` in a YAML spec are refused by field name.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    turns: str | int = 1
    think_time_s: float = Field(0.0, ge=0)
    system_prompt_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    system_prompts: int = Field(1, ge=1, le=MAX_SYSTEM_PROMPTS)
    block_size: int = Field(DEFAULT_BLOCK_SIZE, ge=1, le=MAX_TOKENS)


class _SpecFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    trace: str | None = None
    format: str | None = None
    arrival: str | None = None
    prompt_len: str | int | None = None
    output_len: str | int | None = None
    num_requests: int | None = Field(None, ge=0, le=INT64_MAX)
    duration_s: float | None = Field(None, gt=0)
    speedup: float | None = Field(None, gt=0)
    rate: float | None = Field(None, gt=0)
    window_s: tuple[float, float] | None = None
    sample: float | None = Field(None, gt=0, le=1)
    seed: int | None = Field(None, ge=0, le=INT64_MAX)
    max_model_len: int | None = Field(None, ge=2, le=INT64_MAX)
    sessions: _SessionsModel | None = None


def is_spec_file(path: str | Path) -> bool:
    """True for ``.yaml``/``.yml`` files (workload specs rather than traces)."""
    return Path(path).suffix.lower() in (".yaml", ".yml")


def load_spec_file(path: Path) -> _SpecFile:
    """Read and validate a YAML workload spec (one-line error naming the bad field)."""
    doc = load_yaml(path, "workload spec")
    if not isinstance(doc, dict):
        raise KvscopeError(f"{path}: a workload spec must be a YAML mapping.")
    try:
        return _SpecFile.model_validate(doc)
    except ValidationError as err:
        e = err.errors()[0]
        field = ".".join(str(x) for x in e["loc"])
        raise ConfigError(str(path), field, e["msg"].lower()) from None


def _s(v: str | int | None) -> str | None:
    return None if v is None else str(v)


@dataclass(frozen=True)
class _Lengths:
    """Parses length strings, confining ``empirical:FILE`` to the spec's folder when the
    string came from the spec (flags typed on the command line are not confined)."""

    spec_file: Path | None = None

    def parse(self, text: str, column: str, from_spec: bool) -> LengthDist:
        spec = self.spec_file if from_spec else None
        return parse_length(text, column=column, spec_file=spec)


def _check_flags(
    duration_s: float | None,
    num_requests: int | None,
    speedup: float | None,
    seed: int | None,
    max_model_len: int | None,
) -> None:
    """Library callers (and spec values) get the checks the CLI's flag parser makes."""
    if duration_s is not None:
        finite(duration_s, "--duration", low=0, low_open=True)
    if num_requests is not None:
        count(num_requests, "--num-requests")
    if speedup is not None:
        finite(speedup, "--speedup", low=0, low_open=True)
    if seed is not None:
        count(seed, "--seed")
    if max_model_len is not None:
        count(max_model_len, "--max-model-len", low=2)


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
    """The stream the shared workload flags describe (flags override a YAML spec's fields)."""
    sf = _SpecFile.model_validate({})
    spec_file: Path | None = None
    trace: Path | None = None
    if workload is not None and is_spec_file(workload):
        spec_file = Path(workload)
        sf = load_spec_file(spec_file)
        trace = None if sf.trace is None else inside_spec_folder(spec_file, sf.trace)
    elif workload is not None:
        trace = Path(workload)
    lengths = _Lengths(spec_file)
    from_spec = {"prompt": prompt_len is None, "output": output_len is None}
    arrival = arrival or sf.arrival
    prompt_len = prompt_len or _s(sf.prompt_len)
    output_len = output_len or _s(sf.output_len)
    duration_s = duration_s if duration_s is not None else sf.duration_s
    num_requests = num_requests if num_requests is not None else sf.num_requests
    speedup = speedup if speedup is not None else sf.speedup
    seed = seed if seed is not None else (sf.seed or 0)
    max_model_len = max_model_len if max_model_len is not None else sf.max_model_len
    _check_flags(duration_s, num_requests, speedup, seed, max_model_len)
    if sf.window_s is not None and not sf.window_s[0] < sf.window_s[1]:
        raise ConfigError(str(spec_file), "window_s", "must be [start, end] with start < end")
    ss = np.random.SeedSequence(seed)
    s_arr, s_prompt, s_out, s_sess = ss.spawn(4)
    if trace is not None:
        w = Workload.from_file(trace, fmt or sf.format, skip_bad=skip_bad).shift_to_zero()
        if sf.window_s is not None:
            w = w.window(*sf.window_s).shift_to_zero()
        if sf.rate is not None:
            w = w.rescale_rate(sf.rate)
        if speedup is not None:
            w = w.speedup(speedup)
        if duration_s is not None:
            w = w.window(0.0, duration_s)
        if num_requests is not None:
            w = w.limit(num_requests)
        if sf.sample is not None:
            w = w.sample(fraction=sf.sample, seed=seed)
        for flag, column in ((prompt_len, "prompt"), (output_len, "output")):
            if flag is not None:
                sub = s_prompt if column == "prompt" else s_out
                vals = lengths.parse(flag, column, from_spec[column]).sample(
                    np.random.default_rng(sub), len(w)
                )
                note = {"op": f"resample_{column}_len", "dist": flag}
                w = w.replace(**{f"{column}_tokens": vals}, spec=w._noted(note))
        if arrival is not None:
            w = _retime(w, arrival, s_arr)
    else:
        w = _synthetic(
            sf,
            arrival,
            (prompt_len, output_len),
            duration_s,
            num_requests,
            (lengths, from_spec),
            (s_arr, s_prompt, s_out, s_sess),
            max_model_len,
        )
        if speedup is not None:
            w = w.speedup(speedup)
    if max_model_len is not None:
        w = w.clamp(max_model_len)
    spec: dict[str, Any] = {
        "workload": workload,
        "arrival": arrival,
        "prompt_len": prompt_len,
        "output_len": output_len,
        "duration_s": duration_s,
        "num_requests": num_requests,
        "speedup": speedup,
        "seed": seed,
        "max_model_len": max_model_len,
    }
    spec.update(w.spec)
    return w.replace(spec=spec)


def _retime(w: Workload, arrival: str, seed: np.random.SeedSequence) -> Workload:
    proc = parse_arrival(arrival)
    if isinstance(proc, A.Concurrency):
        out = w.with_arrivals(np.zeros(len(w)), {"op": "retime", "arrival": arrival})
        return out.replace(spec={**out.spec, "closed_loop": _closed(proc)})
    times = A.generate_arrivals(proc, seed, num_requests=len(w))
    return w.with_arrivals(times, {"op": "retime", "arrival": arrival})


def _closed(proc: A.Concurrency) -> dict[str, Any]:
    return {"concurrency": proc.n, "think_s": proc.think_s}


def _synthetic(
    sf: _SpecFile,
    arrival: str | None,
    length_flags: tuple[str | None, str | None],
    duration_s: float | None,
    num_requests: int | None,
    origin: tuple[_Lengths, dict[str, bool]],
    seeds: tuple[np.random.SeedSequence, ...],
    max_model_len: int | None,
) -> Workload:
    if arrival is None:
        raise KvscopeError(
            "no workload: give --workload FILE (a trace or a YAML spec) or --arrival KIND:...",
            hint="e.g. --arrival poisson:rate=10 --num-requests 1000",
        )
    s_arr, s_prompt, s_out, s_sess = seeds
    lengths, from_spec = origin
    prompt_len, output_len = length_flags
    proc = parse_arrival(arrival)
    pdist = lengths.parse(prompt_len or DEFAULT_PROMPT_LEN, "prompt", from_spec["prompt"])
    odist = lengths.parse(output_len or DEFAULT_OUTPUT_LEN, "output", from_spec["output"])
    closed: dict[str, Any] | None = None
    if isinstance(proc, A.Concurrency):
        if num_requests is None:
            raise KvscopeError("closed-loop --arrival concurrency:n=... needs --num-requests.")
        check_request_count(num_requests, "--num-requests")
        times = np.zeros(num_requests)
        closed = _closed(proc)
    else:
        times = A.generate_arrivals(proc, s_arr, num_requests=num_requests, duration_s=duration_s)
    if sf.sessions is not None:
        m = sf.sessions
        sess = SessionSpec(
            turns=lengths.parse(str(m.turns), "prompt", True),
            think_time_s=m.think_time_s,
            system_prompt_tokens=m.system_prompt_tokens,
            system_prompts=m.system_prompts,
            block_size=m.block_size,
        )
        w = generate_sessions(
            sess,
            times,
            pdist,
            odist,
            int(s_sess.generate_state(1)[0]),
            num_requests=num_requests,
            duration_s=duration_s,
            max_model_len=max_model_len,
        )
        extra = {"source": "synthetic", "sessions": m.model_dump(), **w.spec}
    else:
        n = len(times)
        w = Workload.build(
            times,
            pdist.sample(np.random.default_rng(s_prompt), n),
            odist.sample(np.random.default_rng(s_out), n),
        )
        extra = {"source": "synthetic"}
    if closed is not None:
        extra["closed_loop"] = closed
    return w.replace(spec=extra)
