"""The bench's library configuration refuses what no run could use (issue #20).

The flags already refuse NaN; these are the Python API's ways in: ``ClientConfig``,
``LoadConfig``, ``BenchOptions``, ``parse_slo`` and the credentials a URL carries.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import pytest

from kvscope.bench import BenchOptions, ClientConfig, LoadConfig, parse_slo
from kvscope.bench.client import ErrorKind, StreamParser, Trace, normalize_base_url
from kvscope.errors import KvscopeError
from kvscope.redact import redact_text

URL = "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("request_timeout_s", math.nan, "--request-timeout"),
        ("request_timeout_s", 0.0, "--request-timeout"),
        ("request_timeout_s", -5.0, "--request-timeout"),
        ("request_timeout_s", math.inf, "--request-timeout"),
        ("stream_timeout_s", math.nan, "--stream-timeout"),
        ("stream_timeout_s", 0.0, "--stream-timeout"),
        ("connect_timeout_s", -1.0, "connect timeout"),
        ("model", "", "--model"),
        ("endpoint", "embeddings", "--endpoint"),
        ("base_url", "not-a-url", "bad URL"),
    ],
)
def test_client_config_refuses_unusable_values(field: str, value: Any, needle: str) -> None:
    kw: dict[str, Any] = {"base_url": URL, "model": "m", field: value}
    with pytest.raises(KvscopeError, match=needle):
        ClientConfig(**kw)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"warmup_s": math.nan}, "--warmup"),
        ({"cooldown_s": -1.0}, "--cooldown"),
        ({"max_concurrency": 0}, "--max-concurrency"),
        ({"closed_loop": 0}, "closed loop"),
        ({"think_s": math.inf}, "think"),
        ({"scrape_interval_s": 0.0001}, "--scrape-interval"),
        ({"drain_timeout_s": math.nan}, "drain"),
        ({"drain_timeout_s": 0.0}, "drain"),
    ],
)
def test_load_config_refuses_unusable_values(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(KvscopeError, match=needle):
        LoadConfig(**kw)


@pytest.mark.parametrize(
    "kw",
    [
        {"max_error_rate": math.nan},
        {"max_error_rate": 1.5},
        {"preflight_timeout_s": 0.0},
        {"slo": {"ttft_p99_s": math.inf}},
        {"slo": {"ttft_p99_s": math.nan}},
    ],
)
def test_bench_options_refuse_unusable_values(kw: dict[str, Any]) -> None:
    with pytest.raises(KvscopeError):
        BenchOptions(**kw)


@pytest.mark.parametrize("text", ["ttft_p99=inf", "ttft_p99=1e400", "ttft_p150=1", "e2e_p97=2"])
def test_slo_strings_that_no_summary_could_meet_are_refused(text: str) -> None:
    with pytest.raises(KvscopeError, match="--slo"):
        parse_slo(text)


def test_slo_percentile_spellings_agree() -> None:
    assert parse_slo("ttft_p99.0=1,itl_p99.90=20ms") == {"ttft_p99_s": 1.0, "itl_p999_s": 0.02}


def test_url_credentials_become_basic_auth_and_leave_the_url() -> None:
    cfg = ClientConfig("http://alice:S3cr%40t-pw@127.0.0.1:8000/v1", "m")
    assert cfg.url == "http://127.0.0.1:8000/v1/completions"  # no userinfo on the wire
    token = cfg.headers()["Authorization"].removeprefix("Basic ")
    assert base64.b64decode(token).decode() == "alice:S3cr@t-pw"  # decoded, as Basic wants
    public = json.dumps(cfg.public())
    assert "S3cr" not in public and "alice" not in public and cfg.public_url == URL
    # the password and the header token are masked in any text written later
    assert "S3cr@t-pw" not in (redact_text(f"denied: S3cr@t-pw {token}") or "")


def test_url_credentials_and_an_api_key_together_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BOTH_KEY", "k-123456")
    cfg = ClientConfig("http://u:pw-both-1@127.0.0.1:8000", "m", api_key_env="BOTH_KEY")
    with pytest.raises(KvscopeError, match="one Authorization header") as err:
        cfg.headers()
    assert "pw-both-1" not in err.value.one_line()


def test_a_bad_url_error_does_not_repeat_its_password() -> None:
    with pytest.raises(KvscopeError, match="bad URL") as err:
        normalize_base_url("http://u:Hunter2-pw@127.0.0.1:99999")
    assert "Hunter2-pw" not in err.value.one_line()


def test_the_api_key_is_masked_in_error_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHO_KEY", "plainKEY-4a7c9e1b")
    cfg = ClientConfig(URL, "m", api_key_env="ECHO_KEY")
    cfg.headers()  # reading the key registers it
    tr = Trace(0, "r", 0.0, 1, 1)
    tr.fail(ErrorKind.HTTP_STATUS, "http 401: key plainKEY-4a7c9e1b is not valid")
    assert "plainKEY" not in tr.error and tr.error.startswith("http 401: key ***")


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 1e30, "completion_tokens": 3},
        {"prompt_tokens": "many", "completion_tokens": 3},
        {"prompt_tokens": 5, "completion_tokens": 2**70},
        {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1e300}},
    ],
)
def test_usage_no_column_can_hold_is_a_malformed_stream(usage: dict[str, Any]) -> None:
    event = b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
    with pytest.raises(ValueError):
        StreamParser(Trace(0, "r", 0.0, 1, 1), False).feed(event, 0.0)


def test_an_endless_line_is_refused_not_buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kvscope.bench.client.MAX_LINE_BYTES", 1000)
    parser = StreamParser(Trace(0, "r", 0.0, 1, 1), False)
    with pytest.raises(ValueError, match="event line"):
        for _ in range(20):
            parser.feed(b"x" * 100, 0.0)
