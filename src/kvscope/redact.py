"""Secrets hygiene: what kvscope writes or serves never carries an API key or URL credentials.

Two entry points, used by everything that writes a run directory, a store row, an exporter
label or a log line that may contain user-supplied text:

- :func:`redact_url`: ``http://user:PASS@host:8000/v1?api_key=K`` → ``http://host:8000/v1?api_key=***``
  (userinfo dropped; query parameters whose name looks like a credential masked).
- :func:`redact_text`: any known secret (the API key kvscope sends, passwords found in URLs),
  ``Bearer``/``Basic`` credentials and credential-bearing URLs inside free text (error bodies
  a server echoes) replaced by ``***``.

Secrets to mask are registered once per process with :func:`register_secret` by the code that
reads them (``--api-key``, ``OPENAI_API_KEY``, a URL's password), so writers need not carry them.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

MASK = "***"

_SECRETS: set[str] = set()

#: Query-parameter names that carry credentials (compared case-insensitively, as substrings).
_SECRET_PARAMS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "signature")

# "scheme:/" with one slash too: a URL that went through a filesystem path loses one.
_URL_CREDS = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*:/{1,3})(?P<creds>[^/\s@:]*(?::[^/\s@]*)?)@"
)
# "Bearer X", "Basic X", and any scheme after "Authorization:" ("Authorization: Token X");
# a bare "token" is an English word ("no token within 1 s") and is left alone.
_AUTH_HEADER = re.compile(
    r"(?i)\b(authorization\s*[:=]\s*[A-Za-z]+|bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"
)
_KEY_VALUE = re.compile(
    r"(?i)((?:api[_-]?key|access[_-]?token|auth[_-]?token|password|secret)[\"']?\s*[:=]\s*[\"']?)"
    r"[^\s\"',;&}]+"
)
#: Shapes of common provider keys (sk-..., hf_...), masked even when never registered.
_KEY_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,})\b")


#: Substrings one of which every pattern below needs (compared lower-cased): a fast pre-check.
_TRIGGERS = ("@", "bearer", "basic", "authorization", "key", "token", "password", "secret",
             "sk-", "hf_")  # fmt: skip


def register_secret(secret: str | None) -> None:
    """Remember a secret this process holds, so :func:`redact_text` masks it everywhere."""
    if secret and len(secret) >= 4:
        _SECRETS.add(secret)


def basic_auth(url: str) -> tuple[str, str | None]:
    """``url`` without ``user:password@`` and the HTTP Basic ``Authorization`` value they
    stand for (RFC 7617), or None when it carries none.

    The credentials still reach the server, in the header, but never a stored row, a label or
    a log line: the password and the header are registered as secrets to mask.
    """
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    user, password = unquote(user), unquote(password)
    register_secret(password)
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    register_secret(token)
    return urlunsplit(parts._replace(netloc=hostport)), f"Basic {token}"


def redact_url(url: str) -> str:
    """``url`` without userinfo and with credential-like query values masked."""
    if not url or "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return redact_text(url) or url
    if parts.password:
        register_secret(parts.password)
    if parts.username:
        register_secret(parts.username)
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None:
        netloc += f":{port}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        masked = [(k, MASK if any(s in k.lower() for s in _SECRET_PARAMS) else v) for k, v in pairs]
        query = urlencode(masked, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str | None) -> str | None:
    """``text`` with registered secrets, URL credentials and auth tokens replaced by ``***``."""
    if not text:
        return text
    lowered = text.lower()
    if not any(t in lowered for t in _TRIGGERS) and not any(x in text for x in _SECRETS):
        return text  # the common case, without running a regular expression
    out = text
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in out:
            out = out.replace(secret, MASK)
    out = _URL_CREDS.sub(lambda m: m.group("scheme"), out)
    out = _AUTH_HEADER.sub(lambda m: f"{m.group(1)} {MASK}", out)
    out = _KEY_VALUE.sub(lambda m: f"{m.group(1)}{MASK}", out)
    return _KEY_SHAPES.sub(MASK, out)
