"""``kvscope plan --mamba-cache-mode``: vLLM's state blocks per request of an attention +
linear-attention hybrid (Qwen3.6-35B-A3B NVFP4 from the test Hub cache, offline). ``align``
(vLLM's pick for Qwen3.5-type models under --enable-prefix-caching) reserves two state blocks
a request where ``none`` reserves one, so the same pool reports fewer tokens; bad values and
SGLang are refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ["--model", "nvidia/Qwen3.6-35B-A3B-NVFP4", "--gpu", "RTX-5090"]
DEPLOY = [*MODEL, "--engine-version", "0.24.0", "--max-model-len", "131072", "--json"]


def _plan(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    from tests.plan.log_cases import hub_cache

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HUB_CACHE=str(hub_cache()), HF_HUB_OFFLINE="1", HOME=str(tmp_path))
    env["PYTHONPATH"] = str(ROOT / "src")
    cmd = [sys.executable, "-m", "kvscope.cli.main", "plan", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_align_reserves_a_second_state_block_a_request(tmp_path: Path) -> None:
    none, align = (_plan(tmp_path, *DEPLOY, "--mamba-cache-mode", m) for m in ("none", "align"))
    assert none.returncode == 0 and align.returncode == 0, align.stderr
    n, a = json.loads(none.stdout), json.loads(align.stdout)
    assert n["num_gpu_blocks"] == a["num_gpu_blocks"]  # same pool, same blocks
    # tokens = blocks x max_model_len / blocks a max-length request reserves; align adds one
    # state block per linear-attention group (3 here: 30 of 40 layers over 10-layer groups)
    per_request_none = n["num_gpu_blocks"] * 131072 / n["kv_tokens"]
    per_request_align = a["num_gpu_blocks"] * 131072 / a["kv_tokens"]
    assert round(per_request_align - per_request_none) == 3
    default = json.loads(_plan(tmp_path, *DEPLOY).stdout)
    assert default["kv_tokens"] == n["kv_tokens"]


def test_bad_mode_and_sglang_are_one_line(tmp_path: Path) -> None:
    for extra in (
        ["--mamba-cache-mode", "bogus"],
        ["--mamba-cache-mode", "align", "--engine", "sglang"],
    ):
        out = _plan(tmp_path, *MODEL, *extra)
        assert out.returncode == 2
        assert len(out.stderr.strip().splitlines()) == 1 and "--mamba-cache-mode" in out.stderr
