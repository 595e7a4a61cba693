"""Fixtures for telemetry tests: recorded pages and a real HTTP server on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from metrics_page_server import PageServer

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixture_text() -> Callable[[str], str]:
    """``fixture_text(name)`` -> the text of ``tests/telemetry/fixtures/<name>``."""
    return lambda name: (FIXTURES / name).read_text()


@pytest.fixture
def page_server() -> Iterator[type[PageServer]]:
    servers: list[PageServer] = []

    class Factory(PageServer):
        def __init__(self, pages: list[str], multiprocess: bool = False) -> None:
            super().__init__(pages, multiprocess=multiprocess)
            servers.append(self)

    yield Factory
    for s in servers:
        s.close()
