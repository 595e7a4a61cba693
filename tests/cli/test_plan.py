"""`kvscope plan`: JSON contract, human table, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli_helpers import run_kvscope

SRC = Path(__file__).resolve().parents[2] / "src"
KEYS = (
    "weights_gib",
    "activation_peak_gib",
    "non_torch_gib",
    "cudagraph_gib",
    "kv_cache_gib",
    "kv_bytes_per_token",
    "num_gpu_blocks",
    "kv_tokens",
    "max_concurrency",
    "roofline",
    "comm",
    "cost",
    "advice",
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_kvscope("plan", *args, env={"PYTHONPATH": str(SRC)}, timeout=60)


@pytest.mark.integration
def test_json_has_the_contract_keys_and_the_engine_figures() -> None:
    proc = run(
        "--model",
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "H100",
        "--engine-version",
        "0.19.0",
        "--gpu-memory-utilization",
        "0.95",
        "--max-model-len",
        "8192",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in KEYS:
        assert key in out
    assert out["weights_gib"] == pytest.approx(14.99, abs=0.01)
    assert out["kv_tokens"] == pytest.approx(476_016, rel=0.005)  # the vLLM 0.19 log
    assert out["advice"]["command"].startswith("vllm serve meta-llama/Llama-3.1-8B")


@pytest.mark.integration
def test_human_table_has_units() -> None:
    proc = run(
        "--model",
        "deepseek-ai/DeepSeek-V2-Lite",
        "--gpu",
        "A100-80GB",
        "--tp",
        "2",
        "--engine",
        "sglang",
    )
    assert proc.returncode == 0, proc.stderr
    assert "GiB" in proc.stdout and "tokens" in proc.stdout
    assert "python -m sglang.launch_server" in proc.stdout


def _with_and_without_custom_all_reduce(args: tuple[str, ...]) -> tuple[dict, dict]:
    """``plan ARGS`` as JSON, then the same with ``--disable-custom-all-reduce``."""
    on, off = run(*args), run(*args, "--disable-custom-all-reduce")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    return json.loads(on.stdout), json.loads(off.stdout)


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_disable_custom_all_reduce_leaves_nccl_buffers_and_is_repeated(engine: str) -> None:
    args = ("--model", "meta-llama/Llama-3.1-70B", "--gpu", "H100", "--tp", "4")
    args += ("--engine", engine, "--max-model-len", "8192", "--json")
    if engine == "vllm":  # from 0.26.0 an NVSwitch group grows what one GPU grows either way
        args += ("--engine-version", "0.25.0")
    on_doc, off_doc = _with_and_without_custom_all_reduce(args)
    assert off_doc["non_torch_gib"] < on_doc["non_torch_gib"] - 0.5
    assert off_doc["kv_cache_gib"] > on_doc["kv_cache_gib"]
    assert off_doc["advice"]["command"].endswith("--disable-custom-all-reduce")
    assert "--disable-custom-all-reduce" not in on_doc["advice"]["command"]


@pytest.mark.integration
def test_cold_compile_plans_the_compile_peak_and_sglang_refuses_it() -> None:
    args = ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "L40S", "--engine-version", "0.29.0")
    args += ("--max-num-batched-tokens", "512", "--max-num-seqs", "8", "--json")
    warm, cold = run(*args), run(*args, "--cold-compile")
    assert warm.returncode == 0 and cold.returncode == 0, warm.stderr + cold.stderr
    warm_doc, cold_doc = json.loads(warm.stdout), json.loads(cold.stdout)
    # 128,256 x 4,096 bf16 embedding table plus two 512 x 4,096 outputs: 0.986 GiB
    assert cold_doc["activation_peak_gib"] == pytest.approx(0.986, abs=0.001)
    assert cold_doc["kv_cache_gib"] < warm_doc["kv_cache_gib"] - 0.5
    bad = run(
        "--model",
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "L40S",
        "--engine",
        "sglang",
        "--cold-compile",
    )
    assert bad.returncode == 2 and "--cold-compile" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--model", "meta-llama/Llama-3.1-70B", "--gpu", "H100"), "--tensor-parallel-size"),
        (("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--tp", "3"), "divide"),
        # The weights fit but one full-length request does not: offer the longest length
        # that fits (as vLLM's own error does) beside the layout that keeps it.
        (("--model", "meta-llama/Llama-3.1-8B", "--gpu", "L4"), "(the most that fits), or"),
        (
            (
                "--model",
                "deepseek-ai/DeepSeek-V3",
                "--gpu",
                "H200",
                "--tp",
                "8",
                "--engine",
                "sglang",
                "--engine-version",
                "0.4.9",
                "--enable-dp-attention",
            ),
            "--data-parallel-size",
        ),
        (
            ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--kv-cache-dtype", "fp9"),
            "Did you mean",
        ),
        (
            ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--num-gpus", "4", "--tp", "2"),
            "--num-gpus",
        ),
        (
            (
                "--model",
                "meta-llama/Llama-3.1-8B",
                "--gpu",
                "H100",
                "--gpu-memory-utilization",
                "1.5",
            ),
            "(0, 1]",
        ),
    ],
)
def test_impossible_inputs_exit_2_with_one_line(args: tuple[str, ...], needle: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert needle in lines[0]


def test_plan_json_loads_no_numpy() -> None:
    """`plan` prices its steps in plain floats; numpy's import (about a third of the 0.5 s
    budget on a 2-core VM) is left to the commands that simulate."""
    import sys

    code = (
        "import sys, runpy\n"
        "sys.argv = ['kvscope', 'plan', '--model', 'deepseek-ai/DeepSeek-V3', '--gpu', 'H200',"
        " '--tp', '8', '--json']\n"
        "try:\n"
        "    runpy.run_module('kvscope.cli.main', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('NUMPY', 'numpy' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-400:]
    assert '"kv_tokens"' in out.stdout
    assert "NUMPY False" in out.stderr


@pytest.mark.integration
def test_an_unread_vision_tower_is_noted_in_the_table_and_the_json() -> None:
    # vLLM 0.12-0.14's profiling pass is not read: there the plan says it charges no encoder
    # terms instead of leaving them out silently (at the default release Mistral 3 is read)
    config = Path(__file__).resolve().parents[1] / "plan" / "data" / "configs"
    args = ("--model", str(config / "mistral-small-3.1-24b-instruct-2503.json"), "--gpu", "H100")
    old = ("--engine-version", "0.13.0", "--max-model-len", "32768")
    table = run(*args, *old)
    assert table.returncode == 0, table.stderr
    assert "mistral3 vision tower is not modelled" in " ".join(table.stdout.split())
    doc = json.loads(run(*args, *old, "--json").stdout)
    assert any("mistral3 vision tower" in n for n in doc["notes"])
    now = json.loads(run(*args, "--max-model-len", "32768", "--json").stdout)
    assert not any("profiling pass" in n for n in now["notes"])
    qwen = run("--model", str(config / "qwen3.5-9b.json"), "--gpu", "H100", "--json")
    assert not any("profiling pass" in n for n in json.loads(qwen.stdout)["notes"])


def test_entrypoint_offline_takes_the_llm_class_budget() -> None:
    # vLLM's offline LLM() class batches 16384 tokens by default on an H100 where `vllm serve`
    # batches 8192 (EngineArgs.get_batch_defaults, UsageContext.LLM_CLASS)
    base = ("plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--json")
    serve = json.loads(run_kvscope(*base).stdout)
    offline = json.loads(run_kvscope(*base, "--entrypoint", "offline").stdout)
    assert (serve["max_num_batched_tokens"], offline["max_num_batched_tokens"]) == (8192, 16384)
    assert offline["kv_tokens"] < serve["kv_tokens"]  # a larger profiling pass
    bad = run_kvscope(*base, "--entrypoint", "llm")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--entrypoint must be serve or offline" in bad.stderr


@pytest.mark.integration
def test_from_vllm_026_the_flag_leaves_an_nvswitch_pool_as_it_is() -> None:
    # vLLM 0.26.0+ runs the profiling pass's all-gather on the communicator built before the
    # worker's snapshot (kvscope.plan.vllm_collectives): on H100s the flag frees nothing
    args = ("--model", "meta-llama/Llama-3.1-70B", "--gpu", "H100", "--tp", "4")
    args += ("--max-model-len", "8192", "--engine-version", "0.31.0", "--json")
    on_doc, off_doc = _with_and_without_custom_all_reduce(args)
    assert off_doc["non_torch_gib"] == pytest.approx(on_doc["non_torch_gib"])
    assert on_doc["non_torch_gib"] < 1.0
