"""Gemma 4's KV-shared layers under pipeline parallelism (kvscope.plan.kv_sharing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_helpers import run_kvscope
from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_sharing import sharing_targets
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import hub_cache, offline_hub

E2B = "google/gemma-4-E2B"


def _e2b():  # type: ignore[no-untyped-def]
    with offline_hub():
        return load_model(E2B)


def test_shared_layers_read_the_last_earlier_layer_of_their_type() -> None:
    # google/gemma-4-E2B: 35 layers, the last 20 shared; every fifth layer is full attention,
    # so the shared sliding layers read layer 13 and the shared full ones layer 14
    targets = sharing_targets(_e2b())
    assert sorted(targets) == list(range(15, 35))
    assert {targets[i] for i in range(15, 35)} == {13, 14}
    assert targets[19] == targets[24] == 14 and targets[15] == targets[33] == 13


def test_vllm_refuses_a_stage_without_the_cache_it_reads() -> None:
    model, gpu = _e2b(), get_gpu("L4")
    eng = EngineConfig(engine="vllm", engine_version="0.31.1")
    assert plan_memory(model, gpu, Parallelism(tp=1), eng).kv_tokens > 0
    with pytest.raises(KvscopeError, match=r"layer 1[34] \(stage 0\)"):
        plan_memory(model, gpu, Parallelism(pp=2), eng)
    # a model without KV sharing splits as before
    with offline_hub():
        other = load_model("meta-llama/Meta-Llama-3.1-8B-Instruct")
    assert sharing_targets(other) == {}
    assert plan_memory(other, gpu, Parallelism(pp=2), eng).kv_tokens > 0


def test_cli_says_it_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HUB_CACHE=str(hub_cache()), HF_HUB_OFFLINE="1", HOME=str(tmp_path))
    out = run_kvscope(
        "plan", "--model", E2B, "--gpu", "L4", "--pipeline-parallel-size", "4", env=env
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "reads the KV cache of layer 13 (stage 1)" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
