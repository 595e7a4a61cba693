"""Fixtures for bench tests: real servers on 127.0.0.1 in subprocesses.

``mock_server(...)`` starts ``kvscope mock-server --port 0`` and returns its base URL;
``llama_server`` starts llama.cpp's real ``llama-server`` on a tiny random-weight GGUF model
that ``tests/llama_cpp.py`` writes (no download), and skips with the reason when the binary is not
built (``scripts/build_llama_server.sh``; the Makefile builds it before ``make test``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # bench_helpers.py beside this file
from bench_helpers import LlamaServer, start_mock, stop

from llama_cpp import llama_server_binary, write_tiny_llama


@pytest.fixture
def mock_server() -> Iterator[Callable[..., str]]:
    procs: list[subprocess.Popen[str]] = []

    def start(*flags: str) -> str:
        proc, url = start_mock(*flags)
        procs.append(proc)
        return url

    yield start
    for p in procs:
        stop(p)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture
def llama_server(tiny_gguf: Path) -> Iterator[LlamaServer]:
    binary = llama_server_binary()
    if binary is None:
        pytest.skip(
            "llama-server is not built (run scripts/build_llama_server.sh, or set "
            "KVSCOPE_LLAMA_SERVER); the Makefile builds it before make test"
        )
    server = LlamaServer(binary, tiny_gguf)
    server.start()
    yield server
    server.kill()
