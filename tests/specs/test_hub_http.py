"""Hub downloads against a real loopback HTTP server that answers as huggingface.co does.

The server (aiohttp, 127.0.0.1) serves ``/{org}/{name}/resolve/{revision}/{file}`` with the
headers huggingface_hub reads: ``X-Repo-Commit``, ``ETag``, ``Content-Length`` on success,
``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``, ``RevisionNotFound``, ``EntryNotFound``) on
401/403/404, as documented by huggingface_hub's ``hf_raise_for_status``. huggingface_hub is
pointed at it with ``HF_ENDPOINT``; every kvscope run is a subprocess, as a user runs it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from cli_helpers import one_error_line, run_kvscope
from fault_servers import LoopbackAiohttp
from kvscope.specs.registry import PRESET_DIR

COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"
TOKEN = "hf_plantedTOKENabcdefghij0123456789"
LLAMA_ID = "meta-llama/Llama-3.1-8B-Instruct"
AWQ_ID = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
MODELOPT_ID = "nvidia/Llama-3.1-8B-Instruct-FP8"
GATED_ID = "meta-llama/Llama-3.2-3B-Instruct"  # not a preset


def _llama() -> str:
    raw = json.loads((PRESET_DIR / "meta-llama--Llama-3.1-8B.json").read_text())
    raw.pop("_kvscope")
    return json.dumps(raw)


class FakeHub(LoopbackAiohttp):
    """A Hub on loopback: repos of files at one commit; counts every request it answers."""

    def __init__(self) -> None:
        llama = _llama()
        # AutoAWQ's quant_config.json (as in hugging-quants' AWQ INT4 checkpoints).
        awq = json.dumps({"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"})
        modelopt = json.dumps(
            {"producer": {"name": "modelopt", "version": "0.19.0"},
             "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}}
        )  # fmt: skip
        self.repos: dict[str, dict[str, str]] = {
            LLAMA_ID: {"config.json": llama},
            AWQ_ID: {"config.json": llama, "quant_config.json": awq},
            MODELOPT_ID: {"config.json": llama, "hf_quant_config.json": modelopt},
            GATED_ID: {"config.json": llama},
        }
        self.gated = {GATED_ID}
        self.requests: list[tuple[str, str]] = []
        self.auth: list[str] = []
        super().__init__()

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{org}/{name}/resolve/{rev}/{file}", self._resolve)

    def _error(self, status: int, code: str) -> web.Response:
        headers = {"X-Error-Code": code, "X-Repo-Commit": COMMIT}
        return web.Response(status=status, headers=headers, text=f"{code}\n")

    async def _resolve(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        auth = request.headers.get("Authorization", "")
        self.auth.append(auth)
        repo = f"{request.match_info['org']}/{request.match_info['name']}"
        files = self.repos.get(repo)
        if files is None:  # the Hub hides which private repos exist: 401 without a token
            return self._error(404 if auth else 401, "RepoNotFound")
        if repo in self.gated and auth != "Bearer hf_grantedTOKEN0123456789abcdef":
            return self._error(403 if auth else 401, "GatedRepo")
        if request.match_info["rev"] not in ("main", COMMIT):
            return self._error(404, "RevisionNotFound")
        body = files.get(request.match_info["file"])
        if body is None:
            return self._error(404, "EntryNotFound")
        data = body.encode()
        headers = {
            "X-Repo-Commit": COMMIT,
            "ETag": '"' + hashlib.sha1(data).hexdigest() + '"',
            "Content-Length": str(len(data)),
        }
        if request.method == "HEAD":
            return web.Response(headers=headers)
        return web.Response(body=data, headers=headers)


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    server = FakeHub()
    yield server
    server.close()


def env_for(tmp_path: Path, endpoint: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.pop("TRANSFORMERS_OFFLINE", None)
    # No proxy may take the loopback requests elsewhere.
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        env.pop(key, None)
    return {**env, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": endpoint, **extra}


def plan(env: dict[str, str], model: str, *more: str) -> Any:
    return run_kvscope("plan", "--model", model, "--gpu", "h100", "--json", *more, env=env)


def test_first_fetch_requests_then_cache_only(fake_hub: FakeHub, tmp_path: Path) -> None:
    env = env_for(tmp_path, fake_hub.url)
    out = plan(env, LLAMA_ID)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no progress bar, no log line
    # One request per config file: a GET each (its headers carry the commit and ETag that
    # hf_hub_download would fetch with a HEAD first); the absent quant files answer 404.
    base = f"/{LLAMA_ID}/resolve/main"
    assert fake_hub.requests == [
        ("GET", f"{base}/config.json"),
        ("GET", f"{base}/hf_quant_config.json"),
        ("GET", f"{base}/quant_config.json"),
    ]
    snap = tmp_path / "hf" / "hub" / "models--meta-llama--Llama-3.1-8B-Instruct"
    assert (snap / "refs" / "main").read_text() == COMMIT
    assert (snap / "snapshots" / COMMIT / "config.json").is_file()
    # The layout is huggingface_hub's: its own lookup finds the file and the recorded absences.
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.file_download import _CACHED_NO_EXIST

    where = str(tmp_path / "hf" / "hub")
    found = try_to_load_from_cache(LLAMA_ID, "config.json", cache_dir=where)
    assert found == str(snap / "snapshots" / COMMIT / "config.json")
    assert json.loads(Path(found).read_text()) == json.loads(_llama())
    absent = try_to_load_from_cache(LLAMA_ID, "quant_config.json", cache_dir=where)
    assert absent is _CACHED_NO_EXIST
    ref = plan(env, "meta-llama/Llama-3.1-8B")
    assert json.loads(out.stdout)["weights_gib"] == json.loads(ref.stdout)["weights_gib"]
    # Second run, online: the cache answers, no request at all. Offline too.
    again = plan(env, LLAMA_ID)
    offline = plan({**env, "HF_HUB_OFFLINE": "1"}, LLAMA_ID)
    assert again.stdout == offline.stdout == out.stdout
    assert len(fake_hub.requests) == 3


def test_quant_config_json_feeds_awq(fake_hub: FakeHub, tmp_path: Path) -> None:
    env = env_for(tmp_path, fake_hub.url)
    dense = json.loads(plan(env, LLAMA_ID).stdout)["weights_gib"]
    out = plan(env, AWQ_ID, "--quantization", "awq")
    assert out.returncode == 0, out.stderr
    awq = json.loads(out.stdout)["weights_gib"]
    assert awq < 0.5 * dense  # int4 linears, bf16 embeddings and lm_head
    shown = run_kvscope("models", "show", AWQ_ID, "--quantization", "awq", "--json", env=env)
    assert "awq int4, group 128" in shown.stdout


def test_hf_quant_config_json_is_read(fake_hub: FakeHub, tmp_path: Path) -> None:
    # vLLM maps ModelOpt's producer block to quant_method "modelopt" (FP8: one byte per
    # linear weight); embeddings and the LM head stay bf16.
    env = env_for(tmp_path, fake_hub.url)
    dense = json.loads(plan(env, LLAMA_ID).stdout)["weights_gib"]
    out = plan(env, MODELOPT_ID)
    assert out.returncode == 0, out.stderr
    fp8 = json.loads(out.stdout)["weights_gib"]
    assert 0.5 * dense < fp8 < 0.6 * dense
    assert ("GET", f"/{MODELOPT_ID}/resolve/main/hf_quant_config.json") in fake_hub.requests


def test_not_found_without_token_may_be_private(fake_hub: FakeHub, tmp_path: Path) -> None:
    out = plan(env_for(tmp_path, fake_hub.url), "meta-llama/Llama-3.1-8B-Instructt")
    one_error_line(
        out.returncode, out.stderr, "no such model on the Hub, or a private one", "HF_TOKEN"
    )


def test_not_found_with_token_names_close_presets(fake_hub: FakeHub, tmp_path: Path) -> None:
    env = env_for(tmp_path, fake_hub.url, HF_TOKEN=TOKEN)
    out = plan(env, "meta-llama/Llama-3.1-70B-Instructt")
    line = one_error_line(
        out.returncode, out.stderr, "no such model on the Hub: meta-llama/Llama-3.1-70B-Instructt"
    )
    assert "presets: close matches" in line and "meta-llama/Llama-3.1-70B" in line
    assert TOKEN not in out.stdout + out.stderr
    assert f"Bearer {TOKEN}" in fake_hub.auth  # the token was sent to the Hub, and only there


def test_gated_without_token(fake_hub: FakeHub, tmp_path: Path) -> None:
    out = plan(env_for(tmp_path, fake_hub.url), GATED_ID)
    one_error_line(out.returncode, out.stderr, "gated model: it needs a token", "Set HF_TOKEN")


def test_gated_with_a_token_not_granted(fake_hub: FakeHub, tmp_path: Path) -> None:
    env = env_for(tmp_path, fake_hub.url, HF_TOKEN=TOKEN)
    out = plan(env, GATED_ID)
    one_error_line(out.returncode, out.stderr, "the token in HF_TOKEN has no access")
    assert TOKEN not in out.stdout + out.stderr


def test_unknown_revision(fake_hub: FakeHub, tmp_path: Path) -> None:
    out = plan(env_for(tmp_path, fake_hub.url), LLAMA_ID, "--revision", "v9")
    one_error_line(out.returncode, out.stderr, "has no revision 'v9'")


def test_hung_hub_times_out_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # accepts connections (the backlog) and never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        env = env_for(
            tmp_path,
            f"http://127.0.0.1:{sock.getsockname()[1]}",
            HF_HUB_ETAG_TIMEOUT="1",
            HF_HUB_DOWNLOAD_TIMEOUT="1",
        )
        start = time.monotonic()
        out = plan(env, LLAMA_ID)
        took = time.monotonic() - start
    one_error_line(out.returncode, out.stderr, "gave no config.json within 2 s")
    assert took < 10


def test_unreachable_hub_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed on leaving: connection refused
    env = env_for(
        tmp_path, f"http://127.0.0.1:{port}", HF_HUB_ETAG_TIMEOUT="1", HF_HUB_DOWNLOAD_TIMEOUT="1"
    )
    out = plan(env, LLAMA_ID)
    one_error_line(
        out.returncode, out.stderr, "not in the Hugging Face cache", "huggingface-cli download"
    )
