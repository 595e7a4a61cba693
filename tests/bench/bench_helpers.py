"""Helpers for bench tests: the CLI in a subprocess, the mock server, llama-server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("OPENAI_API_KEY", None)
    return env


def kvscope(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run the CLI from this tree in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(),
        check=False,
        **kw,  # type: ignore[arg-type]
    )


def start_mock(*flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvscope.cli.main", "mock-server", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"mock server did not start: {line!r} {proc.stderr.read()!r}")  # type: ignore[union-attr]
    return proc, line.rsplit(" ", 1)[1].strip()


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """A running llama-server: its URL, its process, and how to start it again."""

    def __init__(self, binary: Path, model: Path, parallel: int = 4) -> None:
        self.binary = binary
        self.model = model
        self.parallel = parallel
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # llama-server (llama.cpp tools/server): loopback only, Prometheus /metrics on, -np
        # slots sharing -c tokens of context, one CPU thread
        cmd = [
            str(self.binary), "-m", str(self.model), "--host", "127.0.0.1",
            "--port", str(self.port), "--metrics", "-np", str(self.parallel),
            "-c", str(512 * self.parallel), "-t", "1", "--no-warmup",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("llama-server did not become healthy in 30 s")

    def requests_processing(self) -> int:
        """Slots busy now, from llama-server's ``llamacpp:requests_processing`` gauge; 0 if down."""
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=1) as r:
                page = r.read().decode()
        except OSError:
            return 0
        for line in page.splitlines():
            if line.startswith("llamacpp:requests_processing"):
                return int(float(line.split()[-1]))
        return 0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- misbehaving servers
ODD_MODES = (
    "html", "json", "silent", "mute-headers",
    # answer the preflight's short requests (max_tokens <= 2) like a server, then misbehave:
    "garbage-sse", "http-500", "close", "close-mid", "huge-usage", "echo",
    # answer each connection's first request in full, keep-alive, then hang up on the next one
    # unanswered: what a client sees when it reuses a connection the server has just closed
    "close-reused",
)  # fmt: skip


def _good_sse(n: int, prompt_tokens: int = 7) -> bytes:
    import json

    out = b""
    for k in range(n):
        choice = {"index": 0, "text": " t", "finish_reason": "length" if k == n - 1 else None}
        out += b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n}
    out += b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def _odd_app(mode: str) -> object:
    import asyncio
    import base64
    import itertools
    import json

    from aiohttp import web

    turn = itertools.count()

    async def sse(request: web.Request, data: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(data)
        await resp.write_eof()
        return resp

    def echoed(request: web.Request) -> str:
        """What a careless server repeats back: the Authorization header, decoded too."""
        auth = request.headers.get("Authorization", "")
        scheme, _, cred = auth.partition(" ")
        plain = base64.b64decode(cred).decode() if scheme == "Basic" else cred
        return f"invalid credentials {auth!r} (decoded: {plain}) for key={plain}"

    async def misbehave(request: web.Request, body: dict[str, object]) -> web.StreamResponse:
        if mode == "garbage-sse":  # an event stream whose events are not JSON
            return await sse(request, b"data: {not json at all\n\ndata: [1, 2\n\n")
        if mode == "http-500":
            return web.json_response({"error": "engine crashed"}, status=500)
        if mode == "close":  # hang up before any answer
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(1)
            return web.Response()
        if mode == "close-mid":  # headers and a token, then the connection drops
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(_good_sse(3)[:60])
            assert request.transport is not None
            request.transport.close()
            return resp
        if mode == "huge-usage":  # usage figures no int64 can hold
            tail = json.dumps({"choices": [], "usage": {"prompt_tokens": 1e30}}).encode()
            return await sse(request, _good_sse(3).replace(b"data: [DONE]", b"data: " + tail))
        # echo: every way a server can repeat credentials back, in turn
        k = next(turn) % 4
        if k == 0:
            return web.json_response({"error": echoed(request)}, status=401)
        if k == 1:
            return web.Response(text=echoed(request), status=500)
        if k == 2:
            err = json.dumps({"error": {"message": echoed(request)}}).encode()
            return await sse(request, b"data: " + err + b"\n\n")
        return await sse(request, _good_sse(int(body.get("max_tokens") or 3)))  # type: ignore[call-overload]

    async def metrics(request: web.Request) -> web.Response:
        # a label the parser rejects: its complaint quotes the label, credentials and all
        plain = echoed(request).rsplit("key=", 1)[1]
        page = f"vllm:num_requests_running{{model_name={plain}}} 1\n"
        return web.Response(text=page, content_type="text/plain")

    used: set[object] = set()

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if mode == "close-reused":
            assert request.transport is not None
            conn = request.transport.get_extra_info("peername")
            if conn in used:
                request.transport.close()
                await asyncio.sleep(1)
                return web.Response()
            used.add(conn)
            body = json.loads(raw or b"{}")
            n, words = int(body.get("max_tokens") or 3), len(str(body.get("prompt")).split())  # type: ignore[call-overload]
            return await sse(request, _good_sse(n, words))
        if mode not in ODD_MODES[:4]:
            if request.path == "/metrics":
                return await metrics(request)
            body = json.loads(raw or b"{}")
            if int(body.get("max_tokens") or 0) <= 2:  # the preflight's probes
                return await sse(request, _good_sse(2, len(str(body.get("prompt")).split())))
            return await misbehave(request, body)
        if mode == "html":  # a web page where the API should be
            return web.Response(
                text="<html><body>Welcome to nginx!</body></html>", content_type="text/html"
            )
        if mode == "json":  # JSON, but no event stream and no OpenAI fields
            return web.json_response({"status": "ok", "version": "1.0"})
        if mode == "silent":  # headers of a stream, then nothing at all
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await asyncio.sleep(3600)
            return resp
        await asyncio.sleep(3600)  # mute-headers: never answers
        return web.Response()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def start_odd_server(mode: str) -> tuple[subprocess.Popen[str], str]:
    """A misbehaving HTTP server on 127.0.0.1 in a subprocess; returns it and its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, mode, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ready"), line
    return proc, f"http://127.0.0.1:{port}"


def max_overlap(starts: list[float], ends: list[float]) -> int:
    """Most intervals [start, end) open at once."""
    events = sorted([(s, 1) for s in starts] + [(e, -1) for e in ends])
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


if __name__ == "__main__":
    from aiohttp import web

    mode, port = sys.argv[1], int(sys.argv[2])

    async def _main() -> None:
        runner = web.AppRunner(_odd_app(mode))  # type: ignore[arg-type]
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print("ready", flush=True)
        import asyncio

        await asyncio.sleep(3600)

    import asyncio

    asyncio.run(_main())
