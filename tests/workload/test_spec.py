"""Parsing the shared workload flag strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError, UnknownNameError
from kvscope.workload import arrivals as A
from kvscope.workload import lengths as L
from kvscope.workload.spec import parse_arrival, parse_length


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("constant:rate=4", A.Constant(4.0)),
        ("poisson:rate=10", A.Renewal(10.0, 1.0)),
        ("poisson:10", A.Renewal(10.0, 1.0)),
        ("gamma:rate=10,cv=2.5", A.Renewal(10.0, 2.5)),
        ("spike:base=5,peak=50,start=1m,length=10s", A.Spike(5, 50, 60, 10)),
        ("ramp:from=1,to=50,duration=5m,curve=exp", A.Ramp(1, 50, 300, "exp")),
        ("steps:min=1,max=20,interval=30", A.Steps(1, 20, 30)),
        ("diurnal:mean=10,amplitude=0.5,period=1h", A.Diurnal(10, 0.5, 3600)),
        ("onoff:rate=20,on=10,off=20", A.OnOff(20, 10, 20)),
        ("concurrency:n=16", A.Concurrency(16)),
    ],
)
def test_arrival_strings(text: str, expected: object) -> None:
    assert parse_arrival(text) == expected


def test_arrival_sum() -> None:
    p = parse_arrival("poisson:rate=5 + spike:base=0,peak=50,start=60,length=10")
    assert p == A.Sum((A.Renewal(5.0), A.Spike(0, 50, 60, 10)))


@pytest.mark.parametrize(
    ("text", "err", "msg"),
    [
        ("poison:rate=1", UnknownNameError, "poisson"),
        ("poisson:rat=1", UnknownNameError, "rate"),
        ("gamma:rate=1", KvscopeError, "cv="),
        ("poisson:rate=-1", KvscopeError, "> 0"),
        ("poisson:rate=abc", KvscopeError, "not a number"),
        ("diurnal:mean=1,amplitude=2", KvscopeError, "fraction"),
        ("concurrency:n=2+poisson:rate=1", KvscopeError, "summed"),
        ("ramp:from=0,to=5,duration=10,curve=exp", KvscopeError, "from="),
    ],
)
def test_bad_arrival_strings(text: str, err: type[KvscopeError], msg: str) -> None:
    with pytest.raises(err) as info:
        parse_arrival(text)
    assert msg in info.value.one_line()  # message or its "did you mean" hint


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512", L.Fixed(512)),
        ("fixed:64", L.Fixed(64)),
        ("uniform:min=10,max=20", L.Uniform(10, 20)),
        ("normal:mean=100,std=10", L.Normal(100, 10)),
        ("lognormal:median=150,sigma=0.8", L.LogNormal(150, 0.8)),
        ("mix:0.95@128,0.05@4096", L.Mix(((0.95, 128, 128), (0.05, 4096, 4096)))),
        ("mix:0.5@100-200,0.5@1000", L.Mix(((0.5, 100, 200), (0.5, 1000, 1000)))),
    ],
)
def test_length_strings(text: str, expected: object) -> None:
    assert parse_length(text) == expected


def test_lognormal_mean_form_converts_to_median() -> None:
    d = parse_length("lognormal:mean=100,sigma=1")
    assert isinstance(d, L.LogNormal)
    assert d.median == pytest.approx(100 / 1.6487212707)  # exp(1/2)


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("0", ">= 1"),
        ("mix:0.9@128,x", "WEIGHT@LEN"),
        ("uniform:min=5,max=1", "min <= max"),
        ("lognormal:sigma=1", "exactly one"),
        ("zipf:a=1", "length distribution"),
    ],
)
def test_bad_length_strings(text: str, msg: str) -> None:
    with pytest.raises(KvscopeError) as info:
        parse_length(text)
    assert msg in info.value.one_line()


def test_empirical_reads_the_right_column(traces_dir: Path) -> None:
    f = traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    p = parse_length(f"empirical:{f}", column="prompt")
    o = parse_length(f"empirical:{f}", column="output")
    assert isinstance(p, L.Empirical) and isinstance(o, L.Empirical)
    assert len(p.values) == 8_819
    assert p.values.mean() == pytest.approx(2048, abs=0.5)
    assert o.values.mean() == pytest.approx(28, abs=0.5)
