"""An OpenAI-compatible streaming mock server with a vLLM-shaped ``/metrics`` page.

For measuring the bench client's own ceiling and for tests: it answers
``/v1/completions`` and ``/v1/chat/completions`` (streaming SSE with a final usage chunk when
``stream_options.include_usage`` is set, or one JSON answer), ``/v1/models``, ``/health`` and
``/metrics``. Timing is scripted: the first chunk ``ttft_s`` after the request, then one chunk
per token every ``itl_s``; with ``itl_s = 0`` all chunks go out in one write. Prompt tokens
are counted as whitespace-separated words. ``fail_rate`` answers that share of requests with
HTTP 500 (seeded). With ``max_running`` it serves that many requests at once and queues the
rest (FIFO), so latency grows with load like a real server's. With ``stall_after`` it
answers that many requests, then every later streaming one stalls: its headers and
``stall_tokens`` token chunks go out, then nothing until the client hangs up (a hung engine,
for testing the client's stream timeout). It binds 127.0.0.1 only.

``/metrics`` uses vLLM v1's names (vllm/v1/metrics/loggers.py): ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (tokens held by running requests
over ``kv_capacity_tokens``), ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

HOST = "127.0.0.1"


@dataclass(frozen=True)
class MockConfig:
    """Scripted behaviour: seconds to the first token and between tokens, tokens per answer."""

    ttft_s: float = 0.0
    itl_s: float = 0.0
    output_len: int | None = None  # None: honour each request's max_tokens
    fail_rate: float = 0.0
    model: str = "mock"
    kv_capacity_tokens: int = 1_000_000
    seed: int = 0
    max_running: int | None = None  # requests beyond this wait in a FIFO queue
    stall_after: int | None = None  # answer this many requests, then stall every later one
    stall_tokens: int = 0  # token chunks a stalled answer sends before going silent


class MockState:
    """Counters behind ``/metrics``."""

    def __init__(self) -> None:
        self.running = 0
        self.kv_tokens = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = 0
        self.failed = 0
        self.waiting = 0
        self.disconnected = 0


def _chunk(cfg: MockConfig, chat: bool, text: str, finish: str | None) -> bytes:
    if chat:
        delta = {"content": text} if text else {}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    doc = {"id": "mock-0", "object": obj, "created": 0, "model": cfg.model, "choices": [choice]}
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


class MockServer:
    """The aiohttp application and its scripted behaviour."""

    def __init__(self, cfg: MockConfig) -> None:
        if not 0 <= cfg.fail_rate <= 1:
            raise ValueError("fail_rate must be within 0-1")
        if (cfg.stall_after is not None and cfg.stall_after < 0) or cfg.stall_tokens < 0:
            raise ValueError("stall_after and stall_tokens must be >= 0")
        self._answered = 0  # requests seen, for stall_after
        self.cfg = cfg
        self.state = MockState()
        self.rng = random.Random(cfg.seed)
        # the token chunk is always the same bytes: build it once per endpoint
        self._tok = {chat: _chunk(cfg, chat, " tok", None) for chat in (False, True)}
        self._last = {chat: _chunk(cfg, chat, " tok", "length") for chat in (False, True)}
        self._slots = asyncio.Semaphore(cfg.max_running) if cfg.max_running else None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024**2)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.cfg.model, "object": "model"}]}
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        s = self.state
        lbl = f'{{model_name="{self.cfg.model}"}}'
        usage = s.kv_tokens / self.cfg.kv_capacity_tokens
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{lbl} {s.running}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{lbl} {s.waiting}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{lbl} {usage:.6f}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{lbl} {s.prompt_tokens}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{lbl} {s.generation_tokens}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{finished_reason="length",model_name="{self.cfg.model}"}}'
            f" {s.success}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        start = time.perf_counter()
        try:
            body = await request.json()
            if chat:
                prompt = " ".join(str(m.get("content", "")) for m in body["messages"])
            else:
                prompt = str(body["prompt"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return web.json_response(
                {"error": {"message": "bad request body", "type": "BadRequestError"}}, status=400
            )
        cfg = self.cfg
        self._answered += 1
        if cfg.stall_after is not None and self._answered > cfg.stall_after:
            return await self._stall(request, chat)
        if cfg.fail_rate and self.rng.random() < cfg.fail_rate:
            self.state.failed += 1
            return web.json_response(
                {"error": {"message": "mock failure", "type": "InternalServerError"}}, status=500
            )
        if self._slots is None:
            return await self._generate(request, body, chat, prompt, start)
        self.state.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.state.waiting -= 1
        try:
            return await self._generate(request, body, chat, prompt, time.perf_counter())
        finally:
            self._slots.release()

    async def _generate(
        self, request: web.Request, body: dict[str, Any], chat: bool, prompt: str, start: float
    ) -> web.StreamResponse:
        cfg = self.cfg
        n_prompt = len(prompt.split())
        n_out = cfg.output_len if cfg.output_len is not None else int(body.get("max_tokens") or 16)
        n_out = max(1, n_out)
        s = self.state
        s.running += 1
        s.kv_tokens += n_prompt
        s.prompt_tokens += n_prompt
        generated = 0
        try:
            if not body.get("stream"):
                await asyncio.sleep(cfg.ttft_s + cfg.itl_s * (n_out - 1))
                generated = n_out
                return web.json_response(self._full(chat, n_prompt, n_out))
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            delay = cfg.ttft_s - (time.perf_counter() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            tok, last = self._tok[chat], self._last[chat]
            if cfg.itl_s <= 0:
                await resp.write(tok * (n_out - 1) + last)
                generated = n_out
                s.kv_tokens += n_out
            else:
                for k in range(n_out):
                    await resp.write(last if k == n_out - 1 else tok)
                    generated += 1
                    s.kv_tokens += 1
                    if k < n_out - 1:
                        await asyncio.sleep(cfg.itl_s)
            tail = b""
            opts = body.get("stream_options") or {}
            if opts.get("include_usage"):
                usage = {
                    "prompt_tokens": n_prompt,
                    "completion_tokens": n_out,
                    "total_tokens": n_prompt + n_out,
                }
                doc = {"id": "mock-0", "object": "usage", "choices": [], "usage": usage}
                tail = b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"
            await resp.write(tail + b"data: [DONE]\n\n")
            await resp.write_eof()
            s.success += 1
            return resp
        except ConnectionResetError:  # the client hung up mid-answer: its choice, not an error
            s.disconnected += 1
            return web.Response(status=499)
        finally:
            s.running -= 1
            s.kv_tokens -= n_prompt + (generated if body.get("stream") else 0)
            s.generation_tokens += generated

    async def _stall(self, request: web.Request, chat: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionResetError):
            for _ in range(self.cfg.stall_tokens):
                await resp.write(self._tok[chat])
            await asyncio.sleep(24 * 3600)  # until the client gives up (the handler is cancelled)
        return resp

    def _full(self, chat: bool, n_prompt: int, n_out: int) -> dict[str, Any]:
        text = " tok" * n_out
        choice: dict[str, Any] = (
            {"index": 0, "message": {"role": "assistant", "content": text}}
            if chat
            else {"index": 0, "text": text}
        )
        choice["finish_reason"] = "length"
        self.state.success += 1
        return {
            "id": "mock-0",
            "object": "chat.completion" if chat else "text_completion",
            "model": self.cfg.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_out,
                "total_tokens": n_prompt + n_out,
            },
        }


async def start(cfg: MockConfig, port: int = 0) -> tuple[web.AppRunner, int]:
    """Start on 127.0.0.1:``port`` (0 picks a free one); returns the runner and the port."""
    runner = web.AppRunner(MockServer(cfg).app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, backlog=4096, reuse_address=True)
    await site.start()
    server = site._server
    assert server is not None
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)


def serve_forever(cfg: MockConfig, port: int, ready: Any = None) -> None:
    """Run until interrupted; ``ready(port)`` is called once listening."""
    from kvscope.bench.runner import run_loop

    async def main() -> None:
        runner, bound = await start(cfg, port)
        if ready is not None:
            ready(bound)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        run_loop(main)
