"""kvscope JSONL/Parquet: byte-identical writes, exact round trip, malformed lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.workload.spec import build_workload
from kvscope.workload.stream import Workload


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_same_seed_gives_byte_identical_files(tmp_path: Path, suffix: str) -> None:
    kw = {
        "arrival": "gamma:rate=30,cv=1.5",
        "prompt_len": "mix:0.95@128,0.05@4096",
        "output_len": "lognormal:median=150,sigma=0.8",
        "num_requests": 5000,
    }
    a = build_workload(**kw, seed=7).save(tmp_path / f"a{suffix}")  # type: ignore[arg-type]
    b = build_workload(**kw, seed=7).save(tmp_path / f"b{suffix}")  # type: ignore[arg-type]
    c = build_workload(**kw, seed=8).save(tmp_path / f"c{suffix}")  # type: ignore[arg-type]
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_float_arrivals_round_trip_exactly(tmp_path: Path) -> None:
    w = build_workload(arrival="poisson:rate=3", num_requests=2000, seed=1)
    for suffix in (".jsonl", ".parquet"):
        back = Workload.from_file(w.save(tmp_path / f"w{suffix}"))
        assert np.array_equal(back.arrival_s, w.arrival_s)
        assert back.request_ids.tolist() == w.request_ids.tolist()


def test_parquet_keeps_the_generating_spec(tmp_path: Path) -> None:
    w = build_workload(arrival="poisson:rate=3", num_requests=10, seed=1)
    back = Workload.from_file(w.save(tmp_path / "w.parquet"))
    assert back.spec["generated_by"]["arrival"] == "poisson:rate=3"
    assert back.spec["generated_by"]["seed"] == 1


def test_jsonl_bad_line_named_then_skipped(tmp_path: Path) -> None:
    f = tmp_path / "w.jsonl"
    f.write_text(
        '{"request_id":"a","arrival_s":0.0,"prompt_tokens":5,"output_tokens":1}\n'
        '{"request_id":"b","arrival_s":1.0,"prompt_tokens":0,"output_tokens":1}\n'
        '{"request_id":"c","arrival_s":2.0,"prompt_tokens":7,"output_tokens":1}\n'
    )
    with pytest.raises(KvscopeError, match=r"w\.jsonl:2: field 'prompt_tokens' must be >= 1"):
        Workload.from_file(f)
    w = Workload.from_file(f, skip_bad=True)
    assert w.request_ids.tolist() == ["a", "c"] and w.spec["skipped_bad_rows"] == 1


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    arrival=st.sampled_from(
        [
            "poisson:rate=50",
            "gamma:rate=20,cv=3",
            "constant:rate=7",
            "spike:base=2,peak=40,start=3,length=2",
            "steps:min=1,max=9,interval=4",
            "ramp:from=1,to=30,duration=20",
            "poisson:rate=3+onoff:rate=30,on=1,off=3",
        ]
    ),
    prompt=st.sampled_from(
        ["uniform:min=1,max=9000", "normal:mean=500,std=300", "mix:0.7@10-20,0.3@5000"]
    ),
    seed=st.integers(0, 2**31),
)
def test_property_same_seed_same_bytes(
    tmp_path: Path, arrival: str, prompt: str, seed: int
) -> None:
    kw = {
        "arrival": arrival,
        "prompt_len": prompt,
        "output_len": "lognormal:median=90,sigma=1",
        "num_requests": 300,
        "seed": seed,
    }
    for suffix in (".jsonl", ".parquet"):
        a = build_workload(**kw).save(tmp_path / f"a{suffix}")  # type: ignore[arg-type]
        b = build_workload(**kw).save(tmp_path / f"b{suffix}")  # type: ignore[arg-type]
        assert a.read_bytes() == b.read_bytes()
