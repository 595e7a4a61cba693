"""build_workload: the shared flags and YAML specs produce the stream they describe."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from kvscope.errors import ConfigError, KvscopeError
from kvscope.workload.spec import build_workload


def test_synthetic_flags_give_the_requested_stream() -> None:
    w = build_workload(
        arrival="poisson:rate=50",
        prompt_len="mix:0.9@100,0.1@2000",
        output_len="64",
        num_requests=4000,
        seed=3,
    )
    assert len(w) == 4000
    assert set(np.unique(w.prompt_tokens).tolist()) == {100, 2000}
    assert np.all(w.output_tokens == 64)
    assert abs(w.mean_rate_per_s - 50) < 6 * 50 / np.sqrt(4000)
    assert w.spec["seed"] == 3 and w.spec["source"] == "synthetic"
    assert w.spec["arrival"] == "poisson:rate=50"


def test_defaults_follow_vllm_random_dataset() -> None:
    w = build_workload(arrival="constant:rate=1", num_requests=3)
    assert w.prompt_tokens.tolist() == [1024] * 3 and w.output_tokens.tolist() == [128] * 3


def test_same_seed_same_stream_other_seed_differs() -> None:
    kw = {
        "arrival": "gamma:rate=20,cv=2",
        "prompt_len": "lognormal:median=300,sigma=0.7",
        "output_len": "uniform:min=1,max=500",
        "num_requests": 1000,
    }
    a, b, c = (build_workload(**kw, seed=s) for s in (5, 5, 6))  # type: ignore[arg-type]
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)


def test_duration_and_speedup_and_clamp() -> None:
    w = build_workload(
        arrival="poisson:rate=10",
        duration_s=60,
        speedup=2.0,
        prompt_len="5000",
        output_len="500",
        max_model_len=4096,
        seed=1,
    )
    assert w.arrival_s.max() < 30
    assert np.all(w.prompt_tokens + w.output_tokens <= 4096)


def test_closed_loop_concurrency_is_marked_in_spec() -> None:
    w = build_workload(arrival="concurrency:n=8,think=0.5", num_requests=20)
    assert np.all(w.arrival_s == 0)
    assert w.spec["closed_loop"] == {"concurrency": 8, "think_s": 0.5}
    with pytest.raises(KvscopeError, match="--num-requests"):
        build_workload(arrival="concurrency:n=8", duration_s=10)


def test_no_workload_is_a_clear_error() -> None:
    with pytest.raises(KvscopeError, match="--workload FILE"):
        build_workload()


def test_trace_replay_with_transforms(traces_dir: Path) -> None:
    f = str(traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    w = build_workload(f, speedup=2.0, duration_s=600, num_requests=1000)
    assert len(w) == 1000 and w.arrival_s[0] == 0 and w.arrival_s[-1] < 600
    full = build_workload(f)
    # the first 1000 requests, with time halved
    assert np.allclose(w.arrival_s, full.arrival_s[:1000] / 2)
    assert np.array_equal(w.prompt_tokens, full.prompt_tokens[:1000])


def test_trace_retimed_with_synthetic_arrivals(traces_dir: Path) -> None:
    f = str(traces_dir / "mooncake_fast25" / "synthetic_trace.jsonl")
    w = build_workload(f, arrival="constant:rate=4", num_requests=100)
    assert np.allclose(np.diff(w.arrival_s), 0.25)
    assert w.hash_block_size == 512 and w.spec["transforms"][-1]["op"] == "retime"


def test_yaml_spec_with_sessions(tmp_path: Path) -> None:
    spec = tmp_path / "chat.yaml"
    spec.write_text(
        "arrival: poisson:rate=2\n"
        "prompt_len: uniform:min=20,max=80\n"
        "output_len: 50\n"
        "num_requests: 300\n"
        "seed: 4\n"
        "sessions: {turns: 'uniform:min=2,max=5', think_time_s: 10, system_prompt_tokens: 256,"
        " system_prompts: 3, block_size: 16}\n"
    )
    w = build_workload(str(spec))
    assert len(w) == 300 and w.hash_block_size == 16 and w.spec["seed"] == 4
    assert w.session_ids is not None and len(set(w.session_ids.tolist())) < 300
    # every request starts with one of three 16-block system prompts
    assert len({tuple(w.hashes_of(i)[:16].tolist()) for i in range(len(w))}) == 3
    # a flag overrides the file
    assert build_workload(str(spec), seed=9).spec["seed"] == 9


def test_yaml_spec_replaying_a_trace_relative_path(tmp_path: Path, traces_dir: Path) -> None:
    # a file named inside a spec must lie in the spec's folder (issue #20), so copy it there
    (tmp_path / "traces").mkdir()
    shutil.copy(
        traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv", tmp_path / "traces"
    )
    spec = tmp_path / "replay.yaml"
    spec.write_text(
        "trace: traces/AzureLLMInferenceTrace_code.csv\nwindow_s: [600, 1200]\nrate: 10\n"
    )
    w = build_workload(str(spec))
    assert w.arrival_s[0] == 0
    assert w.mean_rate_per_s == pytest.approx(10)


def test_yaml_spec_errors_name_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("arrival: poisson:rate=1\nnum_request: 5\n")
    with pytest.raises(ConfigError, match="num_request"):
        build_workload(str(spec))
    spec.write_text("arrival: [unclosed\n")
    with pytest.raises(KvscopeError, match="not valid YAML"):
        build_workload(str(spec))
