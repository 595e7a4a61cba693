"""Hub ids resolved through a real Hugging Face cache folder, offline (HF_HUB_OFFLINE=1).

The cache is laid out as huggingface_hub lays it out (``models--org--name/refs/main`` holding
a commit hash, ``snapshots/<commit>/config.json``), and huggingface_hub's own
``try_to_load_from_cache`` is asked to agree with kvscope's lookup. No test reaches the network.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import one_error_line, run_kvscope
from kvscope.errors import KvscopeError
from kvscope.specs import hub
from kvscope.specs.registry import PRESET_DIR, load_model

MAIN = "0e9e39f249a16976918f6564b8830bc894c89659"
OLD = "5206a32e0bd3067aef1ce90f5528ade7d866253f"
LLAMA_ID = "meta-llama/Llama-3.1-8B-Instruct"
QWEN_MOE_ID = "Qwen/Qwen1.5-MoE-A2.7B"

# Qwen/Qwen1.5-MoE-A2.7B config.json (huggingface.co/Qwen/Qwen1.5-MoE-A2.7B, main): the
# architecture keys as published.
QWEN_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "decoder_sparse_step": 1,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "max_position_embeddings": 8192,
    "model_type": "qwen2_moe",
    "moe_intermediate_size": 1408,
    "norm_topk_prob": False,
    "num_attention_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "shared_expert_intermediate_size": 5632,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}


def preset_config(stem: str) -> dict[str, Any]:
    """A bundled preset's config.json keys (its ``_kvscope`` block dropped)."""
    raw = json.loads((PRESET_DIR / f"{stem}.json").read_text())
    raw.pop("_kvscope")
    return dict(raw)


def put(cache: Path, repo_id: str, commit: str, files: dict[str, str], ref: str | None) -> Path:
    """One snapshot of ``repo_id`` in ``cache``, the way hf_hub_download leaves it."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (snap / name).write_text(text)
    if ref is not None:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snap


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hf" / "hub"
    llama = preset_config("meta-llama--Llama-3.1-8B")
    put(root, LLAMA_ID, MAIN, {"config.json": json.dumps(llama)}, "main")
    # An older snapshot of the same repo with a shorter context (reached by --revision).
    put(
        root,
        LLAMA_ID,
        OLD,
        {"config.json": json.dumps({**llama, "max_position_embeddings": 8192})},
        "v0",
    )
    put(root, QWEN_MOE_ID, MAIN, {"config.json": json.dumps(QWEN_MOE)}, "main")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def cli_env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return {**env, "HF_HOME": str(cache.parent), "HF_HUB_OFFLINE": "1", **extra}


def test_lookup_agrees_with_huggingface_hub(cache: Path) -> None:
    from huggingface_hub import try_to_load_from_cache

    for rev in ("main", "v0", OLD):
        ours = hub.fetch_config_files(LLAMA_ID, rev).config
        theirs = try_to_load_from_cache(LLAMA_ID, "config.json", cache_dir=cache, revision=rev)
        assert str(ours) == theirs
    assert hub.cache_dir() == str(cache)


def test_instruct_id_with_dots_plans_like_the_preset(cache: Path) -> None:
    by_id = load_model(LLAMA_ID)
    preset = load_model("meta-llama/Llama-3.1-8B")
    assert by_id.name == LLAMA_ID
    assert by_id.source.endswith(f"snapshots/{MAIN}/config.json")
    assert by_id.weight_bytes == preset.weight_bytes
    assert by_id.total_params == preset.total_params == 8_030_261_248  # the HF page's 8.03B
    assert by_id.kv_bytes_per_token() == preset.kv_bytes_per_token() == 131072


def test_cli_plan_by_hub_id_matches_preset_weights(cache: Path) -> None:
    env = cli_env(cache)
    got = run_kvscope("plan", "--model", LLAMA_ID, "--gpu", "h100", "--json", env=env)
    ref = run_kvscope(
        "plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100", "--json", env=env
    )
    assert got.returncode == 0, got.stderr
    a, b = json.loads(got.stdout), json.loads(ref.stdout)
    assert a["model"] == LLAMA_ID
    assert a["weights_gib"] == b["weights_gib"] and a["kv_cache_gib"] == b["kv_cache_gib"]


def test_moe_id_with_dot_is_a_hub_id(cache: Path) -> None:
    spec = load_model(QWEN_MOE_ID)
    assert spec.model_type == "qwen2_moe"
    # 24 layers x 16 KV heads x 128 head_dim x (K+V) x 2 bytes
    assert spec.kv_bytes_per_token() == 24 * 16 * 128 * 2 * 2


def test_revision_picks_another_snapshot(cache: Path) -> None:
    assert load_model(LLAMA_ID).max_position_embeddings == 131072
    assert load_model(LLAMA_ID, revision="v0").max_position_embeddings == 8192
    assert load_model(LLAMA_ID, revision=OLD).max_position_embeddings == 8192
    out = run_kvscope("models", "show", LLAMA_ID, "--revision", "v0", "--json", env=cli_env(cache))
    assert out.returncode == 0, out.stderr
    assert OLD in json.dumps(json.loads(out.stdout))


def test_revision_on_a_preset_reads_the_hub_id(cache: Path) -> None:
    # meta-llama/Llama-3.1-8B is a preset, but is not in this cache: a revision asks the Hub.
    with pytest.raises(KvscopeError, match="not in the Hugging Face cache"):
        load_model("meta-llama/Llama-3.1-8B", revision="main")


def test_offline_not_cached_is_one_line(cache: Path) -> None:
    out = run_kvscope("plan", "--model", "Qwen/Qwen3-8B", "--gpu", "h100", env=cli_env(cache))
    line = one_error_line(out.returncode, out.stderr, "Qwen/Qwen3-8B", str(cache), "HF_HUB_OFFLINE")
    assert "huggingface-cli download Qwen/Qwen3-8B config.json" in line


def test_unknown_revision_offline_is_one_line(cache: Path) -> None:
    out = run_kvscope(
        "plan", "--model", LLAMA_ID, "--gpu", "h100", "--revision", "v9", env=cli_env(cache)
    )
    one_error_line(out.returncode, out.stderr, "not in the Hugging Face cache")


@pytest.mark.parametrize(
    "name", ["./missing/config.json", "/no/such/dir", "~/nope", "org/model.json"]
)
def test_path_looking_names_are_no_such_file(cache: Path, name: str) -> None:
    with pytest.raises(KvscopeError, match="no such file"):
        load_model(name)


def test_preset_still_wins_case_insensitively(cache: Path) -> None:
    assert load_model("META-LLAMA/LLAMA-3.1-8B").source == "preset meta-llama/Llama-3.1-8B"


def test_truncated_cached_config_is_one_line(cache: Path) -> None:
    snap = put(
        cache, "org/Broken-1.5B", MAIN, {"config.json": '{"model_type": "llama", "hidd'}, "main"
    )
    out = run_kvscope("plan", "--model", "org/Broken-1.5B", "--gpu", "h100", env=cli_env(cache))
    one_error_line(out.returncode, out.stderr, str(snap / "config.json"), "not valid JSON")


def test_revision_with_a_local_file_is_refused(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(preset_config("meta-llama--Llama-3.1-8B")))
    with pytest.raises(KvscopeError, match="--revision applies to Hugging Face ids"):
        load_model(str(path), revision="main")


def test_token_never_printed(cache: Path) -> None:
    token = "hf_plantedTOKEN0123456789abcdefXYZ"
    env = cli_env(cache, HF_TOKEN=token)
    for args in (
        ("plan", "--model", LLAMA_ID, "--gpu", "h100", "--json"),
        ("plan", "--model", "Qwen/Qwen3-8B", "--gpu", "h100"),
        ("models", "show", LLAMA_ID),
    ):
        out = run_kvscope(*args, env=env)
        assert token not in out.stdout and token not in out.stderr


def test_hub_id_shapes() -> None:
    for name in (LLAMA_ID, QWEN_MOE_ID, "deepseek-ai/DeepSeek-V3.2-Exp", "microsoft/phi-2"):
        assert hub.is_hub_id(name), name
    for name in ("llama", "a/b/c", "./x", "org/x.json", "org/-bad", "org/a..b", "org/a--b"):
        assert not hub.is_hub_id(name), name
