"""SGLang's ``SGLANG_SHARED_EXPERT_TP1`` (``--shared-expert-tp1``): each GPU holds the whole MoE
shared experts (``DeepseekV2MLP(..., tp_rank=0, tp_size=1)`` in ``srt/models/deepseek_v2.py`` of
the 0.5.12-0.5.23 wheels). Pinned to an invariant across two code paths (a TP16 rank with the
switch holds what an unsharded GPU holds), to the start of sglang PR #23933's description
(DeepSeek-V4-Pro on 2x 8 H20, the switch set) and to the one-line refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.sglang_shared_experts import with_whole_shared_experts
from kvscope.plan.weights import all_stage_weights
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

ROOT = Path(__file__).resolve().parents[2]
#: ``kvscope plan`` on DeepSeek-V4-Pro in a subprocess (the CLI's own exit codes and stderr)
PLAN_V4_PRO = (
    sys.executable,
    "-m",
    "kvscope.cli.main",
    "plan",
    "--model",
    "deepseek-ai/DeepSeek-V4-Pro",
)


def _env(home: Path) -> dict[str, str]:
    """The environment without Hugging Face settings, with a fresh HOME and this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT / "src"))
    return env


PRO = load_model("deepseek-ai/DeepSeek-V4-Pro")


def _engine(version: str = "0.5.12", tp1: bool = False) -> EngineConfig:
    return EngineConfig(
        engine="sglang",
        engine_version=version,
        mem_fraction_static=0.9,
        max_num_seqs=16,
        moe_runner_backend="marlin",
        shared_expert_tp1=tp1,
    )


def test_a_tp_rank_then_holds_what_an_unsharded_gpu_holds() -> None:
    whole = all_stage_weights(PRO, Parallelism(tp=1))[0].by_component["shared_experts"]
    for tp in (2, 8, 16):
        rank = with_whole_shared_experts(all_stage_weights(PRO, Parallelism(tp=tp))[0], tp)
        held = rank.by_component["shared_experts"] + rank.by_component["shared_experts_tp1"]
        assert held == pytest.approx(whole, rel=1e-12)
    one = all_stage_weights(PRO, Parallelism(tp=1))[0]
    assert with_whole_shared_experts(one, 1) is one  # nothing to add on one GPU


def test_v4_pro_at_tp16_on_h20_gains_three_and_a_half_gib_a_rank() -> None:
    # V4-Pro's shared expert: 3 x 7,168 x 3,072 FP8 block-quantised parameters in each of its 61
    # layers, about 3.75 GiB whole; a TP16 rank held 1/16 of it.
    par, gpu = Parallelism(tp=16, dp=2, dp_attention=True), get_gpu("H20")
    off, on = (plan_memory(PRO, gpu, par, _engine(tp1=t)) for t in (False, True))
    gained = on.ranks[0].weights_gib - off.ranks[0].weights_gib
    assert 3.4 < gained < 3.6
    assert on.kv_tokens < off.kv_tokens


def test_models_without_shared_experts_are_unchanged() -> None:
    gpu = get_gpu("H100")
    eng = EngineConfig(engine="sglang", engine_version="0.5.12", shared_expert_tp1=True)
    base = EngineConfig(engine="sglang", engine_version="0.5.12")
    for name in ("meta-llama/Llama-3.1-8B", "mistralai/Mixtral-8x7B-v0.1"):
        model = load_model(name)
        on, off = (plan_memory(model, gpu, Parallelism(tp=2), e) for e in (eng, base))
        assert on.kv_tokens == off.kv_tokens


def test_the_pr_23933_row_carries_the_switch_its_command_sets() -> None:
    case = case_by_id("sglang-pr23933-v4pro-2x8h20-tp16-dp2")
    assert case.row["shared_expert_tp1"] == "1"
    weights = case.plan().ranks[0].weights_gib * GIB
    without = (
        plan_memory(PRO, get_gpu("H20"), Parallelism(tp=16, dp=2, dp_attention=True), _engine())
        .ranks[0]
        .weights_gib
        * GIB
    )
    assert weights > without


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--engine", "vllm"], "vLLM has none"),
        (["--engine", "sglang", "--engine-version", "0.5.11"], "0.5.12"),
    ],
)
def test_engines_without_the_switch_refuse_it_in_one_line(
    tmp_path: Path, extra: list[str], needle: str
) -> None:
    env = _env(tmp_path)
    cmd = [*PLAN_V4_PRO]
    cmd += ["--gpu", "H20", "--tp", "16", "--shared-expert-tp1", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and needle in out.stderr


def test_the_cli_flag_reaches_the_plan(tmp_path: Path) -> None:
    env = _env(tmp_path)
    cmd = [*PLAN_V4_PRO]
    cmd += ["--gpu", "H20", "--tp", "16", "--engine", "sglang", "--engine-version", "0.5.12"]
    cmd += ["--moe-runner-backend", "marlin", "--json"]
    runs = [
        subprocess.run(c, capture_output=True, text=True, env=env, timeout=120, check=False)
        for c in (cmd, [*cmd, "--shared-expert-tp1"])
    ]
    assert all(r.returncode == 0 for r in runs), runs[1].stderr
    off, on = (json.loads(r.stdout) for r in runs)
    assert on["kv_tokens"] < off["kv_tokens"]
    assert on["advice"]["command"].startswith("SGLANG_SHARED_EXPERT_TP1=1 ")


def test_the_config_refuses_it_for_vllm() -> None:
    with pytest.raises(KvscopeError):
        EngineConfig(engine="vllm", shared_expert_tp1=True)
