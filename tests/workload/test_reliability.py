"""Workload specs and builds on hostile input (issue #20): one error line, nothing huge.

Hand-parsed strings (``poisson:rate=nan``, ``mix:1.5@128``) are not covered by the CLI's
flag parser, a synthetic stream's size is known before anything is drawn, and a YAML spec
(a file people share) may only name files inside its own folder.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.limits import MAX_REQUESTS
from kvscope.workload.spec import build_workload, parse_arrival, parse_length
from kvscope.workload.stats import workload_stats


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("poisson:rate=nan", "not a number"),
        ("poisson:rate=-1", "> 0"),
        ("poisson:rate=0", "> 0"),
        ("poisson:rate=1e400", "not a number"),
        ("gamma:rate=10,cv=inf", "not a number"),
        ("gamma:rate=10,cv=-1", ">= 0"),
        ("concurrency:n=1e30", "<= 1,000,000"),
        ("spike:base=1,peak=5,start=nan,length=1", "not a number"),
    ],
)
def test_bad_arrival_parameters(text: str, message: str) -> None:
    with pytest.raises(KvscopeError, match=message):
        parse_arrival(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mix:1.5@128", "not a fraction"),
        ("mix:0.5@128", "add up to 1"),
        ("mix:1e308@128,1e308@3", "not a fraction"),
        ("lognormal:median=-1,sigma=1", "> 0"),
        ("lognormal:median=100,sigma=1e3", "<= 10"),
        ("normal:mean=1e300,std=1", "<= "),
        ("99999999999999999999999", "<= 4,294,967,296"),
        ("uniform:min=1,max=99999999999999999999", "<= 4,294,967,296"),
        ("mix:1@99999999999999999999999", "<= 4,294,967,296"),
    ],
)
def test_bad_length_parameters(text: str, message: str) -> None:
    with pytest.raises(KvscopeError, match=message):
        parse_length(text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"speedup": 0.0}, "--speedup must be > 0"),
        ({"speedup": -2.0}, "--speedup must be > 0"),
        ({"duration_s": 0.0}, "--duration must be > 0"),
        ({"duration_s": float("nan")}, "--duration must be a finite number"),
        ({"seed": -1}, "--seed must be >= 0"),
        ({"num_requests": -1}, "--num-requests must be >= 0"),
    ],
)
def test_bad_build_flags(kwargs: dict[str, float], message: str) -> None:
    args = {"arrival": "poisson:rate=5", "num_requests": 10, **kwargs}
    with pytest.raises(KvscopeError, match=message):
        build_workload(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"arrival": "poisson:rate=1e9", "duration_s": 1e6},  # the audit's 7.28 TiB
        {"arrival": "poisson:rate=10", "num_requests": 10**15},
        {"arrival": "concurrency:n=10", "num_requests": 10**15},
        {"arrival": "spike:base=1e9,peak=1e9,start=0,length=1", "duration_s": 1e6},
        {"arrival": "ramp:from=1,to=1e308,duration=1,curve=exp", "duration_s": 100},
    ],
)
def test_a_huge_stream_is_refused_by_size_before_drawing(kwargs: dict[str, object]) -> None:
    start = time.monotonic()
    with pytest.raises(KvscopeError, match=f"limit of {MAX_REQUESTS:,}"):
        build_workload(**kwargs)  # type: ignore[arg-type]
    assert time.monotonic() - start < 10  # refused, not attempted


def test_a_count_within_a_huge_horizon_is_still_served() -> None:
    # rate x duration is enormous, but only ten requests are asked for
    w = build_workload(arrival="poisson:rate=1e9", duration_s=1e6, num_requests=10)
    assert len(w) == 10


def test_steps_with_a_tiny_interval_do_not_allocate_per_interval() -> None:
    w = build_workload(arrival="steps:min=1,max=2,interval=1e-9", num_requests=10)
    assert len(w) == 10
    with pytest.raises(KvscopeError, match="too short"):
        build_workload(arrival="steps:min=1,max=2,interval=1e-300", duration_s=10)


# ---------------------------------------------------------------------------- spec files

SECRET_LINE = "root:SECRET-do-not-print:0:0"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A private file outside the spec's folder (stands in for /etc/shadow)."""
    f = tmp_path / "private.csv"
    f.write_text(SECRET_LINE + "\n")
    return f


@pytest.mark.parametrize(
    "body",
    [
        "arrival: poisson:rate=1\nnum_requests: 5\nprompt_len: empirical:{outside}\n",
        "arrival: poisson:rate=1\nnum_requests: 5\noutput_len: empirical:../private.csv\n",
        "trace: {outside}\n",
        "trace: ../private.csv\n",
        "arrival: poisson:rate=1\nnum_requests: 5\nsessions: {{turns: 'empirical:{outside}'}}\n",
    ],
)
def test_a_spec_may_not_name_a_file_outside_its_folder(
    tmp_path: Path, outside: Path, body: str
) -> None:
    spec = tmp_path / "shared" / "spec.yaml"
    spec.parent.mkdir()
    spec.write_text(body.format(outside=outside))
    with pytest.raises(KvscopeError) as info:
        build_workload(str(spec))
    line = info.value.one_line()
    assert "outside its own folder" in line and "pass it on the command line" in line
    assert "SECRET" not in line


def test_a_symlink_out_of_the_spec_folder_is_refused(tmp_path: Path, outside: Path) -> None:
    spec = tmp_path / "shared" / "spec.yaml"
    spec.parent.mkdir()
    (spec.parent / "trace.csv").symlink_to(outside)
    spec.write_text("trace: trace.csv\n")
    with pytest.raises(KvscopeError, match="outside its own folder"):
        build_workload(str(spec))


def test_files_inside_the_spec_folder_and_on_the_command_line_are_read(
    tmp_path: Path, outside: Path
) -> None:
    folder = tmp_path / "shared"
    (folder / "traces").mkdir(parents=True)
    trace = folder / "traces" / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.0,100,10\n2023-11-16 18:15:47.0,300,20\n"
    )
    spec = folder / "spec.yaml"
    spec.write_text(
        "arrival: poisson:rate=1\nnum_requests: 20\nprompt_len: empirical:traces/t.csv\n"
    )
    w = build_workload(str(spec))
    assert set(w.prompt_tokens.tolist()) <= {100, 300}
    # a flag given on the command line is the user's own choice: not confined
    with pytest.raises(KvscopeError) as info:
        build_workload(str(spec), prompt_len=f"empirical:{outside}")
    assert "not a recognised trace format" in info.value.one_line()
    assert "SECRET" not in info.value.one_line()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("arrival: poisson:rate=1\nduration_s: .inf\n", "duration_s"),
        ("arrival: poisson:rate=1\nnum_requests: 5\nseed: -1\n", "seed"),
        ("arrival: poisson:rate=1\nnum_requests: 5\nsessions: {think_time_s: .nan}\n", "think"),
        (
            "arrival: poisson:rate=1\nnum_requests: 5\nsessions: {system_prompts: 10000000000}\n",
            "system_prompts",
        ),
    ],
)
def test_spec_numbers_are_finite_and_bounded(tmp_path: Path, body: str, field: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(body)
    with pytest.raises(KvscopeError, match=field):
        build_workload(str(spec))


@pytest.mark.parametrize("block_size", [-16, 0])
def test_stats_block_size_must_be_positive(block_size: int) -> None:
    w = build_workload(arrival="poisson:rate=5", num_requests=10)
    with pytest.raises(KvscopeError, match="--block-size must be >= 1"):
        workload_stats(w, block_size=block_size)


def test_stats_of_a_trace_spanning_1e300_seconds(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(
        '{"request_id":"a","arrival_s":0.0,"prompt_tokens":1,"output_tokens":1}\n'
        '{"request_id":"b","arrival_s":1e300,"prompt_tokens":1,"output_tokens":1}\n'
    )
    s = workload_stats(build_workload(str(f)))
    assert s["requests"] == 2 and s["peak_rate_per_s"] == 1
