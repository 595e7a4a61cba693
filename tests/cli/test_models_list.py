"""``kvscope models list``: every preset id in full at 80 columns, and ``--json`` (issue #21)."""

from __future__ import annotations

import json
import os

from cli_helpers import run_kvscope


def test_models_list_shows_every_id_in_full_at_80_columns() -> None:
    ids = [r["id"] for r in json.loads(run_kvscope("models", "list", "--json").stdout)]
    assert "mistralai/Mistral-Small-24B-Instruct-2501" in ids and len(ids) >= 19
    out = run_kvscope("models", "list", env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "…" not in out.stdout
    assert max(len(line) for line in lines) <= 80
    starts = {line.split()[0] for line in lines if line.strip()}
    assert set(ids) <= starts  # each id whole, at the start of its row
    row = next(line for line in lines if line.startswith("meta-llama/Llama-3.1-8B "))
    assert row.split()[1:] == ["32", "8.0", "8.0", "131,072", "bf16"]


def test_models_list_json_is_what_bare_models_json_was() -> None:
    listed = run_kvscope("models", "list", "--json")
    bare = run_kvscope("models", "--json")
    assert listed.returncode == bare.returncode == 0
    assert json.loads(listed.stdout) == json.loads(bare.stdout)


def test_wide_terminal_adds_the_attention_layout() -> None:
    out = run_kvscope("models", "list", env={**os.environ, "COLUMNS": "140"})
    row = next(line for line in out.stdout.splitlines() if line.startswith("openai/gpt-oss-20b "))
    assert "sliding×12, full×12" in row
