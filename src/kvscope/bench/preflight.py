"""Before the clock starts: is this an OpenAI-compatible streaming server, and how does it count?

:func:`check_and_calibrate` sends a few short streaming requests (one at a time, bounded by
``timeout_s`` each). A refused connection, a bad status, a page that is not an event stream or
a server that accepts the request but never streams becomes one :class:`KvscopeError` line —
the CLI's exit 2, never a traceback. Without a tokenizer, the same requests calibrate the
prompt builder: two prompts of known word counts give tokens per word and the fixed overhead
(BOS, chat template) from the server's own ``usage.prompt_tokens``.
"""

from __future__ import annotations

import dataclasses
import math

from kvscope.bench.client import ClientConfig, ErrorKind, Trace, stream_request
from kvscope.bench.pool import make_session
from kvscope.bench.prompts import Calibration, PromptBuilder, calibration_words, fit_calibration
from kvscope.errors import KvscopeError
from kvscope.workload.request import Request

#: A server error (5xx or an error event) is retried this often before the check gives up:
#: a run measuring a flaky server should start, and count the failures.
PREFLIGHT_ATTEMPTS = 5


def _transient(tr: Trace) -> bool:
    return tr.error_kind == ErrorKind.SERVER_ERROR or (
        tr.error_kind == ErrorKind.HTTP_STATUS and tr.http_status >= 500
    )


def _explain(cfg: ClientConfig, tr: Trace, timeout_s: float) -> str:
    url = cfg.public_url + cfg.endpoint.path  # never the URL's password on stderr
    kind = tr.error_kind
    if kind == ErrorKind.CONNECTION_REFUSED:
        return f"cannot connect to {cfg.public_url}: {tr.error.removeprefix('cannot connect: ')}."
    if kind == ErrorKind.TIMEOUT:
        if math.isnan(tr.first_byte_s):
            return f"{url} did not answer within {timeout_s:g} s."
        if tr.chunk_times:
            return f"{url} stopped streaming for {timeout_s:g} s mid-answer."
        return f"{url} accepted the request but streamed no token within {timeout_s:g} s."
    if kind == ErrorKind.HTTP_STATUS:
        if tr.http_status in (401, 403):
            return (
                f"{url} refused the request (HTTP {tr.http_status}): set the API key in "
                f"${cfg.api_key_env}."
            )
        if tr.http_status in (404, 405):
            return (
                f"{url} answered HTTP {tr.http_status}: no OpenAI-compatible "
                f"{cfg.endpoint.path} there ({tr.error.partition(': ')[2][:120]})."
            )
        return f"{url} answered {tr.error}."
    if kind == ErrorKind.MALFORMED_STREAM:
        return f"{url} is not an OpenAI-compatible streaming endpoint: {tr.error}."
    if kind == ErrorKind.SERVER_ERROR:
        return f"{url} reported an error: {tr.error.removeprefix('server error event: ')}."
    return f"{url}: {tr.error}."


async def _probe(cfg: ClientConfig, prompt: str, max_tokens: int, timeout_s: float) -> Trace:
    from kvscope.bench.client import make_body

    probe_cfg = dataclasses.replace(
        cfg,
        request_timeout_s=timeout_s,
        connect_timeout_s=min(timeout_s, cfg.connect_timeout_s),
        stream_timeout_s=timeout_s,
    )
    tr = Trace(0, "preflight", 0.0, 0, max_tokens)
    async with make_session(probe_cfg) as session:
        body = make_body(probe_cfg, prompt, max_tokens)
        await stream_request(session, probe_cfg, probe_cfg.headers(), body, tr, 0.0)
    return tr


async def check_and_calibrate(
    cfg: ClientConfig, builder: PromptBuilder, timeout_s: float
) -> tuple[Calibration | None, dict[str, object]]:
    """Raise a one-line KvscopeError unless the server streams; measure prompt token counts."""
    samples: list[tuple[int, int]] = []
    facts: dict[str, object] = {}
    # a probe gets no longer than a request of the run would wait on a silent server
    limit = min(timeout_s, cfg.stream_timeout_s)
    for words in calibration_words():
        req = Request("calibration", 0.0, words, 2)
        prompt = builder.filler(words, 7 + words)
        for _attempt in range(PREFLIGHT_ATTEMPTS):
            tr = await _probe(cfg, prompt, 2, limit)
            if not _transient(tr):
                break
        if tr.error_kind and tr.error_kind != ErrorKind.EARLY_STOP:
            raise KvscopeError(_explain(cfg, tr, limit))
        facts["usage_reported"] = tr.usage_prompt_tokens >= 0
        facts["probe_ttft_s"] = tr.first_token_s - tr.sent_s
        if tr.usage_prompt_tokens >= 0:
            samples.append((req.prompt_tokens, tr.usage_prompt_tokens))
        if builder.tokenizer is not None:
            break
    if builder.tokenizer is not None:
        return None, facts
    if len(samples) < 2:
        return Calibration(1.0, 0.0, "assumed (the server reports no usage)"), facts
    return fit_calibration(samples, "measured (server usage.prompt_tokens)"), facts
