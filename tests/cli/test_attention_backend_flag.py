"""``--attention-backend`` is one flag of ``plan``, ``simulate`` and ``tune``: a name the vLLM
release lacks, a backend the model cannot run, and SGLang are refused in one line (exit 2);
a good name reaches the plan's block size and its ``vllm serve`` line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

PLAN = ["plan", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "B200", "--tp", "8"]
WL = ["--arrival", "poisson:rate=20", "--prompt-len", "300", "--output-len", "40"]
WL += ["--num-requests", "30", "--seed", "2"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--attention-backend", "TRITON_MLAA"], "'TRITON_MLAA' is not a backend of vLLM"),
        (
            ["--attention-backend", "FLASHMLA_SPARSE_DSV4", "--engine-version", "0.22.0"],
            "not a backend of vLLM 0.22.0",
        ),
        (["--attention-backend", "FLASH_ATTN"], "needs an MLA backend"),
        (["--attention-backend", "CUSTOM"], "plugin"),
        (["--attention-backend", "triton", "--engine", "sglang"], "vLLM only"),
    ],
)
def test_plan_refusals_are_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    code, _, err = run_in_process([*PLAN, *extra], capsys)
    one_error_line(code, err, needle)


def test_plan_takes_the_backends_block_size(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on B200 at 0.22: TRITON_MLA's 16-token blocks (multiples of 16, so
    ``get_preferred_block_size(16)``), FLASHINFER_MLA's 32 (its kernel takes 32 or 64)."""
    sizes = {}
    for name in ("TRITON_MLA", "FLASHINFER_MLA"):
        argv = [*PLAN, "--engine-version", "0.22.0", "--attention-backend", name, "--json"]
        code, out, err = run_in_process(argv, capsys)
        assert code == 0, err
        doc = json.loads(out)
        memory = doc.get("memory", doc)
        sizes[name] = memory["block_size"]
        assert memory["attention_backend"] == name
        assert f"--attention-backend {name}" in out
    assert sizes == {"TRITON_MLA": 16, "FLASHINFER_MLA": 32}


def test_simulate_refuses_like_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["simulate", *WL, "--attention-backend", "NOPE", "--out", str(tmp_path / "run")]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, "'NOPE' is not a backend of vLLM")
    argv = ["simulate", *WL, "--engine", "sglang", "--attention-backend", "triton"]
    code, _, err = run_in_process([*argv, "--out", str(tmp_path / "run2")], capsys)
    one_error_line(code, err, "vLLM only")


def test_tune_refuses_like_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("tp: [1]\ndp: [1]\n")
    argv = ["tune", *WL, "--slo", "ttft_p99=2", "--space", str(space), "--max-gpus", "1"]
    argv += ["--out", str(tmp_path / "out"), "--attention-backend", "TRITON_MLAA"]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, "'TRITON_MLAA' is not a backend of vLLM")
    assert not (tmp_path / "out").exists()


def test_simulate_pool_follows_the_backend(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """V0's FlashInfer keeps a 256 MiB workspace from the profiling pass (flashinfer.py of the
    0.6.4 wheel): the simulated pool of the default model (Llama 3.1 8B, 128 KiB a token)
    loses 256 MiB = 128 blocks of 16 tokens."""
    caps = []
    for i, extra in enumerate(([], ["--attention-backend", "FLASHINFER"])):
        argv = ["simulate", *WL, "--engine-version", "0.6.4", *extra, "--json"]
        code, out, err = run_in_process([*argv, "--out", str(tmp_path / f"r{i}")], capsys)
        assert code == 0, err
        caps.append(json.loads(out)["kv_blocks_capacity"])
    assert caps[0] - caps[1] == 128


def test_tune_points_run_with_the_backend(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Each tuned point is simulated with the flag: the V0 FlashInfer pool of
    :func:`test_simulate_pool_follows_the_backend` (128 blocks fewer than automatic)."""
    space = tmp_path / "space.yaml"
    space.write_text(
        "tp: [1]\ndp: [1]\nkv_cache_dtype: [auto]\nmax_num_seqs: [null]\n"
        "max_num_batched_tokens: [null]\n"
    )
    caps = []
    for i, extra in enumerate(([], ["--attention-backend", "FLASHINFER"])):
        out = tmp_path / f"t{i}"
        argv = ["tune", *WL, "--slo", "ttft_p99=2", "--space", str(space), "--max-gpus", "1"]
        argv += ["--workers", "1", "--eta", "1", "--engine-version", "0.6.4", *extra]
        code, _, err = run_in_process([*argv, "--out", str(out), "--json"], capsys)
        assert code == 0, err
        (point,) = (out / "points").glob("*/summary.json")
        summary = json.loads(point.read_text())
        assert summary["config"]["attention_backend"] == (extra[1] if extra else None)
        caps.append(summary["kv_blocks_capacity"])
    assert caps[0] - caps[1] == 128
