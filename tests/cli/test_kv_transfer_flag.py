"""``plan --kv-transfer-config``: vLLM's JSON with LMCache's connector reaches the plan's notes
and its ``vllm serve`` line; SGLang, other connectors, bad JSON and bad ``LMCACHE_*`` values
are refused in one line (exit 2)."""

from __future__ import annotations

import json

import pytest

from cli_helpers import one_error_line, run_in_process

PLAN = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--engine-version", "0.9.2"]
LMCACHE = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--engine", "sglang"], "--kv-transfer-config is a vLLM setting"),
        (["--engine-version", "0.8.2"], "V1 connector"),
    ],
)
def test_refusals_are_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    argv = [*PLAN, "--kv-transfer-config", LMCACHE, *extra]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, needle)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "is not JSON"),
        ('{"kv_connector":"P2pNcclConnector","kv_role":"kv_both"}', "is not modelled"),
    ],
)
def test_bad_json_is_one_line(capsys: pytest.CaptureFixture[str], text: str, needle: str) -> None:
    code, _, err = run_in_process([*PLAN, "--kv-transfer-config", text], capsys)
    one_error_line(code, err, needle)


def test_bad_lmcache_variable_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMCACHE_CHUNK_SIZE", "big")
    code, _, err = run_in_process([*PLAN, "--kv-transfer-config", LMCACHE], capsys)
    one_error_line(code, err, "LMCACHE_CHUNK_SIZE='big' is not an integer")


def test_plan_notes_the_buffer_and_passes_the_flag(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMCACHE_CHUNK_SIZE", "512")
    code, out, err = run_in_process([*PLAN, "--kv-transfer-config", LMCACHE, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    memory = doc.get("memory", doc)
    # Llama-3.1-8B, TP1, bf16: [2, 32 layers, 512 tokens, 8 x 128] x 2 B = 64 MiB
    assert any("64.00 MiB GPU staging buffer" in n for n in memory["notes"])
    bare = json.loads(run_in_process([*PLAN, "--json"], capsys)[1])
    assert bare.get("memory", bare)["kv_tokens"] == memory["kv_tokens"]
    assert "--kv-transfer-config" in out
