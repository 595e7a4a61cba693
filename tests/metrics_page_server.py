"""A ``/metrics`` server on loopback that serves recorded exposition pages the way engines do.

vLLM and SGLang serve ``/metrics`` through ``prometheus_client``'s ASGI app, which honours the
``name[]`` query parameter by rendering a restricted registry (``prometheus_client.exposition``
``_bake_output``). This server does the same with the same library: without ``name[]`` it
sends the recorded page byte for byte; with it, the page's families go through
``CollectorRegistry.restricted_registry`` and ``generate_latest``. It speaks HTTP/1.1 with
keep-alive, as uvicorn does.

Used by the telemetry tests (``PageServer`` in a thread) and by
``benchmarks/telemetry_sampling.py`` (``python tests/metrics_page_server.py PORT FILE``).
"""

from __future__ import annotations

import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry


class _Recorded:
    """A collector that yields the families of one recorded page."""

    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _registry(page: str, multiprocess: bool = False) -> CollectorRegistry:
    # vLLM serves prometheus_client's global registry (auto_describe) from one API server,
    # and with several a fresh CollectorRegistry() holding a MultiProcessCollector, which
    # has no describe(): the restricted registry then knows no names and renders nothing
    # (vllm/v1/metrics/prometheus.py get_prometheus_registry, vLLM 0.33.0).
    registry = CollectorRegistry(auto_describe=not multiprocess)
    registry.register(_Recorded(page))
    return registry


def render(page: str, query: str, registry: CollectorRegistry | None = None) -> bytes:
    """The body an engine's prometheus_client app sends for ``/metrics?<query>``.

    ``registry`` is the page's parsed registry when the caller keeps one (parsing a 550-line
    page costs milliseconds; an engine renders from live objects).
    """
    names = urllib.parse.parse_qs(query).get("name[]")
    if not names:
        return page.encode()
    return generate_latest((registry or _registry(page)).restricted_registry(names))


class PageServer:
    """Serves ``pages[i]`` at ``/metrics``; ``advance()`` moves to the next page.

    ``paths`` records every request path with its query (what the scraper asked for).
    ``multiprocess`` serves the way vLLM does with several API servers (see ``_registry``).
    """

    def __init__(self, pages: list[str], port: int = 0, multiprocess: bool = False) -> None:
        self.pages = pages
        self.index = 0
        self.hits = 0
        self.paths: list[str] = []
        self.registries: dict[str, CollectorRegistry] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if path != "/metrics":
                    self.send_error(404)
                    return
                owner.hits += 1
                owner.paths.append(self.path)
                page = owner.pages[owner.index]
                if query and page not in owner.registries:
                    owner.registries[page] = _registry(page, multiprocess)
                body = render(page, query, owner.registries.get(page))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def advance(self) -> None:
        self.index = min(self.index + 1, len(self.pages) - 1)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    with open(sys.argv[2]) as f:
        srv = PageServer([f.read()], port=int(sys.argv[1]))
    srv.thread.join()
