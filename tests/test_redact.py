"""Secrets hygiene: no credential survives redaction, whatever text carries it."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.redact import redact_text, redact_url, register_secret

SAFE = string.ascii_letters + string.digits + "-_."


def test_url_credentials_and_key_parameters_are_dropped() -> None:
    url = "http://alice:s3cr3t-pw@10.1.2.3:8000/v1/completions?api_key=K123456&model=x"
    out = redact_url(url)
    assert out == "http://10.1.2.3:8000/v1/completions?api_key=***&model=x"
    # The password is now known: it is masked in free text too, without a URL around it.
    assert redact_text("server said: bad password s3cr3t-pw") == "server said: bad password ***"


def test_urls_without_credentials_are_unchanged() -> None:
    for url in ("http://127.0.0.1:8000", "https://[::1]:9/metrics", "not-a-url", ""):
        assert redact_url(url) == url


def test_free_text_forms() -> None:
    register_secret("sk-registered-abcdef0123456789")
    text = (
        'error {"detail": "invalid key sk-registered-abcdef0123456789"} '
        "Authorization: Bearer abcdef.ghijkl "
        "see http://bob:hunter2@host:1/x and http:/carol:pw2@host/y "
        "api_key=zzzzzz, password: 'p4ss' hf_ABCDEFGHIJKLMNOPQRSTUVWX"
    )
    out = redact_text(text) or ""
    for secret in ("sk-registered", "abcdef.ghijkl", "hunter2", "pw2", "zzzzzz", "p4ss", "hf_ABC"):
        assert secret not in out, (secret, out)
    assert "http://host:1/x" in out and "http:/host/y" in out


@settings(max_examples=300, deadline=None)
@given(
    user=st.text(SAFE, min_size=1, max_size=12),
    password=st.text(SAFE, min_size=4, max_size=24),
    host=st.sampled_from(["127.0.0.1", "example.internal", "[::1]"]),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    before=st.text(max_size=30),
    after=st.text(max_size=30),
)
def test_no_url_password_survives(
    user: str, password: str, host: str, port: int | None, before: str, after: str
) -> None:
    netloc = f"{user}:{password}@{host}" + (f":{port}" if port else "")
    url = f"http://{netloc}/v1"
    assert password not in redact_url(url).split("@")[-1] or password in f"{host}{port}/v1"
    text = redact_text(f"{before} {url} {after}") or ""
    assert f"{user}:{password}@" not in text
