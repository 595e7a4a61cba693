"""``kvscope tune`` on the command line: --json, and one line with exit 2 for bad input
(an SLO no point meets still writes the table of the closest points)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

WORKLOAD = [
    "--arrival",
    "poisson:rate=20",
    "--prompt-len",
    "lognormal:median=500,sigma=0.7",
    "--output-len",
    "120",
    "--num-requests",
    "120",
    "--seed",
    "3",
]
SMALL = (
    "tp: [1, 2]\ndp: [1]\nkv_cache_dtype: [auto, fp8]\nmax_num_seqs: [null]\n"
    "max_num_batched_tokens: [null]\n"
)


def _space(tmp_path: Path, text: str = SMALL) -> str:
    f = tmp_path / "space.yaml"
    f.write_text(text)
    return str(f)


def _tune(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "tune",
        *WORKLOAD,
        "--max-gpus",
        "2",
        "--workers",
        "1",
        "--eta",
        "1",
        "--out",
        str(tmp_path / "out"),
        *extra,
    ]


def test_json_has_every_point_and_the_winners_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _tune(
        tmp_path, "--slo", "ttft_p99=2,tpot_p99=200ms", "--space", _space(tmp_path), "--json"
    )
    code, out, err = run_in_process(argv, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert [r["rank"] for r in doc["ranked"]] == [1, 2, 3, 4]
    assert {r["label"] for r in doc["ranked"]} >= {"H100x1 tp1 (defaults)", "H100x2 tp2 kv=fp8"}
    for r in doc["ranked"]:
        assert set(r["flags"]) >= {"tp", "dp", "kv_cache_dtype", "max_num_batched_tokens"}
        assert (tmp_path / "out" / r["run_dir"] / "requests.parquet").is_file()
    assert doc["winner"]["command"].startswith("vllm serve meta-llama/Llama-3.1-8B")
    assert doc["winner"]["label"] == doc["ranked"][0]["label"]
    assert (tmp_path / "out" / "report.html").is_file()
    # the same command again resumes the folder and gives the same table
    code, out2, err = run_in_process(argv, capsys)
    assert code == 0, err
    again = json.loads(out2)
    assert again["resumed"] is True and again["ranked"] == doc["ranked"]


def test_an_unmeetable_slo_is_one_line_and_still_writes_the_closest_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _tune(tmp_path, "--slo", "ttft_p99=1ms", "--space", _space(tmp_path))
    code, _out, err = run_in_process(argv, capsys)
    one_error_line(code, err, "no configuration meets the SLO", "ranked.json")
    ranked = json.loads((tmp_path / "out" / "ranked.json").read_text())
    assert len(ranked) == 4 and not any(r["slo_met"] for r in ranked)
    excess = [r["slo_excess"] for r in ranked]
    assert excess == sorted(excess) and excess[0] > 1  # closest first


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--space", "SPACE_L4"], "empty after pruning"),
        (["--tp", "4"], "search space is empty"),
        (["--objective", "cheapest"], "--objective"),
        (["--slo", "itl_p99=1"], "TTFT, TPOT and E2E"),
        (["--engine", "llama.cpp"], "vllm or sglang"),
        (["--space", "MISSING"], "space"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    extra = [
        _space(tmp_path, "gpu: [L4]\ntp: [1]\ndp: [1]\n") if e == "SPACE_L4" else e for e in extra
    ]
    extra = [str(tmp_path / "nope.yaml") if e == "MISSING" else e for e in extra]
    slo = [] if "--slo" in extra else ["--slo", "ttft_p99=1"]
    code, _out, err = run_in_process(_tune(tmp_path, *slo, *extra), capsys)
    one_error_line(code, err, needle)


def test_a_ray_address_that_does_not_answer_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    argv = _tune(tmp_path, "--slo", "ttft_p99=1", "--ray", f"127.0.0.1:{port}")
    code, _out, err = run_in_process(argv, capsys)
    one_error_line(code, err, f"--ray 127.0.0.1:{port}", "no Ray cluster answers")
    assert not (tmp_path / "out").exists()


def test_sglang_winner_gets_an_sglang_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _tune(
        tmp_path,
        "--engine",
        "sglang",
        "--slo",
        "ttft_p99=2,tpot_p99=200ms",
        "--space",
        _space(tmp_path),
        "--json",
    )
    code, out, err = run_in_process(argv, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["winner"]["command"].startswith("python -m sglang.launch_server --model-path ")
    assert doc["ranked"][-1]["label"] != doc["winner"]["label"]


def test_max_time_ends_the_search_with_the_points_finished(tmp_path: Path) -> None:
    import time

    from kvscope.executor import Backend
    from kvscope.sim import SimConfig
    from kvscope.tune.run import TuneRequest, tune
    from kvscope.workload.spec import build_workload

    w = build_workload(
        None, "poisson:rate=20", "lognormal:median=500,sigma=0.7", "120", None, 120, None, 3, None
    )
    req = TuneRequest(
        SimConfig(),
        ("H100",),
        2,
        (("ttft_p99_s", 2.0),),
        eta=2,
        space_file=_space(tmp_path),
        min_requests=30,
        max_time_s=0.5,
    )
    # the first point finishes, then the deadline passes: the point already started runs,
    # no other starts, and no later rung either
    s = tune(req, w, tmp_path / "out", Backend("serial"), on_point=lambda row: time.sleep(0.6))
    assert len(s["ranked"]) == 2
    assert all(r["rung"] == 0 and r["requests_simulated"] == 30 for r in s["ranked"])


def test_a_max_time_too_short_for_any_point_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _tune(
        tmp_path, "--slo", "ttft_p99=1", "--space", _space(tmp_path), "--max-time", "0.000001"
    )
    code, _out, err = run_in_process(argv, capsys)
    one_error_line(code, err, "no point finished within --max-time")


def test_speculative_decoding_is_an_axis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    space = _space(
        tmp_path,
        "tp: [1]\ndp: [1]\nkv_cache_dtype: [auto]\nmax_num_seqs: [null]\n"
        f"max_num_batched_tokens: [null]\nspeculative_config: [null, {json.dumps(spec)}]\n",
    )
    argv = [
        "tune",
        "--arrival",
        "poisson:rate=5",
        "--prompt-len",
        "500",
        "--output-len",
        "200",
        "--num-requests",
        "100",
        "--slo",
        "ttft_p99=1,tpot_p99=50ms",
        "--space",
        space,
        "--spec-acceptance",
        "0.7",
        "--max-gpus",
        "1",
        "--workers",
        "1",
        "--out",
        str(tmp_path / "out"),
        "--json",
    ]
    code, out, err = run_in_process(argv, capsys)
    assert code == 0, err
    doc = json.loads(out)
    with_spec = next(r for r in doc["ranked"] if r["flags"]["speculative_config"])
    plain = next(r for r in doc["ranked"] if r["default"])
    assert with_spec["tpot_p99_s"] < plain["tpot_p99_s"]  # 0.7 acceptance: fewer steps a token
    words = shlex.split(doc["winner"]["command"])
    assert json.loads(words[words.index("--speculative-config") + 1]) == spec


def test_max_configs_is_a_seeded_sample_plus_the_defaults() -> None:
    from kvscope.plan.prices import Prices
    from kvscope.sim import SimConfig
    from kvscope.tune.run import TuneRequest, candidates

    def labels(seed: int) -> list[str]:
        req = TuneRequest(
            SimConfig(), ("H100",), 8, (("ttft_p99_s", 1.0),), max_configs=5, seed=seed
        )
        cands, facts = candidates(req, Prices())
        assert facts["space_points"] == 240 and len(cands) in (5, 6)
        assert cands[0].is_default
        return [c.label for c in cands]

    assert labels(1) == labels(1)
    assert labels(1) != labels(2)
