"""SSE parsing, request bodies, URL handling and error classes of the streaming client."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.bench.client import (
    ClientConfig,
    Endpoint,
    ErrorKind,
    StreamParser,
    Trace,
    make_body,
    normalize_base_url,
)
from kvscope.errors import KvscopeError


def _sse(chat: bool, n: int, usage: bool = True, compact: bool = False) -> bytes:
    dumps = (lambda o: json.dumps(o, separators=(",", ":"))) if compact else json.dumps
    out = []
    if chat:  # vLLM's first chat chunk carries only the role
        first = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
        out.append(b"data: " + dumps(first).encode() + b"\n\n")
    for k in range(n):
        reason = "length" if k == n - 1 else None
        choice = (
            {"index": 0, "delta": {"content": f" w{k}"}, "finish_reason": reason}
            if chat
            else {"index": 0, "text": f" w{k}", "finish_reason": reason}
        )
        out.append(b"data: " + dumps({"choices": [choice]}).encode() + b"\r\n\r\n")
    if usage:
        u = {
            "choices": [],
            "usage": {
                "prompt_tokens": 17,
                "completion_tokens": n,
                "prompt_tokens_details": {"cached_tokens": 16},
            },
        }
        out.append(b": keep-alive comment\n\n")
        out.append(b"data: " + json.dumps(u).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def _trace(out: int = 5) -> Trace:
    return Trace(0, "r0", 0.0, 17, out)


@settings(max_examples=60, deadline=None)
@given(
    chat=st.booleans(),
    n=st.integers(1, 12),
    cuts=st.lists(st.integers(0, 2000), max_size=8),
    compact=st.booleans(),
)
def test_any_split_of_the_byte_stream_gives_the_same_trace(
    chat: bool, n: int, cuts: list[int], compact: bool
) -> None:
    # compact JSON takes the parser's fast path, spaced JSON the full parse: same answer
    data = _sse(chat, n, compact=compact)
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    tr = _trace(n)
    p = StreamParser(tr, chat)
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        p.feed(data[a:b], float(k))
    p.close(99.0)
    assert tr.done_marker
    assert tr.usage_output_tokens == n and tr.usage_prompt_tokens == 17
    assert tr.cached_prompt_tokens == 16
    assert len(tr.chunk_times) == n  # the role-only chat chunk is not a token
    assert tr.chunk_times == sorted(tr.chunk_times)
    assert tr.first_token_s == tr.chunk_times[0]
    assert tr.finish_reason == "length"


def test_without_usage_output_tokens_fall_back_to_chunk_count() -> None:
    tr = _trace(4)
    p = StreamParser(tr, chat=False)
    p.feed(_sse(False, 4, usage=False), 1.0)
    assert tr.usage_output_tokens == -1
    assert tr.output_tokens == 4


def test_error_event_inside_a_stream_is_a_server_error() -> None:
    tr = _trace()
    StreamParser(tr, False).feed(b'data: {"error": {"message": "KV cache full"}}\n\n', 0.5)
    assert tr.error_kind == ErrorKind.SERVER_ERROR
    assert "KV cache full" in tr.error


@pytest.mark.parametrize(
    "payload", [b"data: {not json}\n\n", b"data: [1, 2]\n\n", b'data: {"id": "x"}\n\n']
)
def test_malformed_events_raise_for_classification(payload: bytes) -> None:
    with pytest.raises(ValueError):
        StreamParser(_trace(), False).feed(payload, 0.0)


def test_body_asks_for_usage_and_exact_length() -> None:
    cfg = ClientConfig("http://127.0.0.1:8000", "m", Endpoint.CHAT)
    body = json.loads(make_body(cfg, "hello there", 42))
    assert body["messages"] == [{"role": "user", "content": "hello there"}]
    assert body["max_tokens"] == 42 and body["min_tokens"] == 42 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    plain = ClientConfig("http://h:1", "m", ignore_eos=False)
    b2 = json.loads(make_body(plain, "p", 3))
    assert b2["prompt"] == "p" and "ignore_eos" not in b2 and "min_tokens" not in b2


def test_api_key_goes_in_the_header_and_never_in_the_public_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    cfg = ClientConfig("http://127.0.0.1:8000", "m", api_key_env="MY_KEY")
    assert cfg.headers()["Authorization"] == "Bearer sk-secret-123"
    public = json.dumps(cfg.public())
    assert "sk-secret" not in public and '"api_key_set": true' in public


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
        ("https://gw.internal/llm/v1/chat/completions", "https://gw.internal/llm"),
    ],
)
def test_base_url_normalisation(url: str, base: str) -> None:
    assert normalize_base_url(url) == base


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://h:1", "http://", "http://h:99999"])
def test_bad_urls_are_user_errors(url: str) -> None:
    with pytest.raises(KvscopeError, match="bad URL"):
        normalize_base_url(url)


def test_trace_defaults_are_nan_until_measured() -> None:
    tr = _trace()
    assert math.isnan(tr.sent_s) and math.isnan(tr.first_token_s) and tr.output_tokens == 0
    tr.fail(ErrorKind.TIMEOUT, "first")
    tr.fail(ErrorKind.CONNECTION_RESET, "second")
    assert tr.error_kind == "timeout" and tr.error == "first"  # the first cause wins


@pytest.mark.parametrize(
    ("event", "is_token"),
    [
        (b'{"choices":[{"index":0,"text":"","finish_reason":null}]}', False),
        (b'{"choices":[{"index":0,"text":" a","finish_reason":null}]}', True),
        (b'{"choices":[{"index":0,"delta":{"content":null},"finish_reason":null}]}', False),
        (b'{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}', False),
        (b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}', True),
        # generated text that itself spells a key stays inside its escaped string
        (
            b'{"choices":[{"index":0,"text":"","note":"\\"text\\":\\"y","finish_reason":null}]}',
            False,
        ),
    ],
)
def test_fast_path_agrees_with_the_json_parse(event: bytes, is_token: bool) -> None:
    tr = _trace()
    StreamParser(tr, chat=b"delta" in event).feed(b"data: " + event + b"\n\n", 1.0)
    assert len(tr.chunk_times) == int(is_token)
    slow = json.loads(event)["choices"][0]
    text = slow.get("text") or (slow.get("delta") or {}).get("content")
    assert bool(text) == is_token


_C = '{"choices":[{"index":0,'  # compact, as vLLM writes it
_S = '{"choices": [{"index": 0, '  # spaced: the full parse
_CHUNKS = {  # (chat, kind) -> one event's JSON; "{i}" is the token's number
    (False, "token"): _C + '"text":" w{i}","finish_reason":null}]}',
    (False, "empty"): _C + '"text":"","finish_reason":null}]}',
    (False, "tricky"): _C + '"text":"data: \\"text\\":\\"x","finish_reason":null}]}',
    (False, "spaced"): _S + '"text": " s{i}", "finish_reason": null}]}',
    (True, "token"): _C + '"delta":{"content":" w{i}"},"finish_reason":null}]}',
    (True, "empty"): _C + '"delta":{"content":""},"finish_reason":null}]}',
    (True, "tricky"): _C + '"delta":{"reasoning_content":"r{i}"},"finish_reason":null}]}',
    (True, "spaced"): _S + '"delta": {"content": "s"}, "finish_reason": null}]}',
    # OpenAI's shape with include_usage: "usage":null in every chunk but the last
    (False, "usage-null"): _C + '"text":" u{i}","finish_reason":null}],"usage":null}',
    (True, "usage-null"): _C + '"delta":{"content":"u"},"finish_reason":null}],"usage":null}',
}  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    chat=st.booleans(),
    kinds=st.lists(
        st.sampled_from(["token", "token", "token", "empty", "tricky", "spaced", "usage-null"]),
        min_size=1, max_size=400,
    ),
    cuts=st.lists(st.integers(0, 60_000), max_size=4),
    error_at=st.none() | st.integers(0, 399),
)  # fmt: skip
def test_bulk_counting_agrees_with_the_event_by_event_parse(
    chat: bool, kinds: list[str], cuts: list[int], error_at: int | None
) -> None:
    events = [_CHUNKS[chat, k].replace("{i}", str(i)).encode() for i, k in enumerate(kinds)]
    if error_at is not None and error_at < len(events):
        events[error_at] = b'{"error":{"message":"boom"}}'
    data = b"".join(b"data: " + e + b"\n\n" for e in events) + _sse(chat, 1)
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})

    def parse(bulk_min: float) -> Trace:
        tr = _trace(len(kinds))
        p = StreamParser(tr, chat)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("kvscope.bench.client._BULK_MIN_BYTES", bulk_min)
            for k, (a, b) in enumerate(itertools.pairwise(bounds)):
                p.feed(data[a:b], float(k))
        p.close(99.0)
        return tr

    slow, fast = parse(math.inf), parse(0)
    assert fast == slow
    tokens = sum(k not in ("empty",) for k in kinds) + 1  # + the one of the usage stream
    if error_at is None or error_at >= len(events):
        assert len(slow.chunk_times) == tokens
    else:
        assert slow.error_kind == ErrorKind.SERVER_ERROR


@pytest.mark.parametrize("usage_null", [False, True])
def test_a_whole_answer_in_one_read_is_counted_in_bulk(
    monkeypatch: pytest.MonkeyPatch, usage_null: bool
) -> None:
    # 500 tokens in one read, as a server writing its whole answer at once sends them
    data = _sse(False, 500, compact=True)
    if usage_null:  # OpenAI's chunk shape
        data = data.replace(b'"finish_reason":null}]}', b'"finish_reason":null}],"usage":null}')
    calls = []
    real = StreamParser._event

    def spy(self: StreamParser, payload: bytes, t: float) -> None:
        calls.append(payload)
        real(self, payload, t)

    monkeypatch.setattr(StreamParser, "_event", spy)
    tr = _trace(500)
    StreamParser(tr, chat=False).feed(data, 2.0)
    assert len(tr.chunk_times) == 500 and tr.first_token_s == 2.0
    assert tr.usage_output_tokens == 500 and tr.done_marker and tr.finish_reason == "length"
    assert len(calls) <= 4  # the final chunk, usage and [DONE]: not one call per token
