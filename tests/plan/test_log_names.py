"""Every model a start-up log in engine_logs*.csv names plans by that very name.

The rows carry the Hugging Face id as the log shows it (``-Instruct`` / ``-Chat`` variants,
ids with dots, an org spelled in lower case). Ids that are not bundled presets resolve
through a Hugging Face cache folder laid out as ``huggingface_hub`` lays it out
(``log_cases.hub_cache``), read with ``HF_HUB_OFFLINE=1``: no test reaches the network.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_helpers import run_kvscope
from kvscope.specs import hub
from kvscope.specs.registry import find_preset, load_model

from .log_cases import hub_cache, load_cases, offline_hub

CASES = load_cases()
IDS = sorted({c.row["model"] for c in CASES})


def test_every_row_names_a_hub_id() -> None:
    not_ids = [c.id for c in CASES if not hub.is_hub_id(c.row["model"])]
    assert not not_ids, f"rows naming a file, not the id their log shows: {not_ids}"
    # the walk below is not a formality: names with dots and chat variants are in it
    assert any("." in i.split("/")[1] for i in IDS)
    assert any(i.endswith(("-Instruct", "-it", "-Chat")) for i in IDS)
    assert len(IDS) >= 40


@pytest.mark.parametrize("repo_id", IDS)
def test_id_resolves_offline_as_logged(repo_id: str) -> None:
    with offline_hub() as cache:
        spec = load_model(repo_id)
        if find_preset(repo_id) is None:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache)
            assert isinstance(found, str) and spec.source == found
    assert spec.total_params > 0 and spec.num_layers > 0


def test_cli_plans_ids_with_dots_by_name(tmp_path: Path) -> None:
    # As a user runs it: a subprocess, the cache named by HF_HUB_CACHE, offline.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HUB_CACHE=str(hub_cache()), HF_HUB_OFFLINE="1", HOME=str(tmp_path))
    for repo_id in (
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "Qwen/Qwen1.5-MoE-A2.7B",
        "RedHatAI/Mistral-Small-3.1-24B-Instruct-2503-quantized.w8a8",
    ):
        out = run_kvscope("plan", "--model", repo_id, "--gpu", "h100", "--json", env=env)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["model"] == repo_id
