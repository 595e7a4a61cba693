"""Text traces: ShareGPT-style conversations and prompt logs with the prompt text.

Accepted rows (a JSON array or JSONL):

* ShareGPT: ``{"id", "conversations": [{"from": "human"|"gpt"|"system", "value": text}]}`` -
  every human turn that has an answer becomes one request whose prompt is the whole
  conversation so far (session = ``id``, turn = answer index). A last human message without an
  answer is counted in ``spec["unanswered_turns"]``, not replayed.
* Chat logs: ``{"messages": [{"role", "content"}], ...}`` - one request; a trailing assistant
  message is the answer. Or ``{"prompt": text, ...}``.
* Optional per row: ``timestamp`` or ``arrival_s`` (s), ``output_tokens`` (else from the
  answer text), ``prompt_tokens`` (else estimated), ``session_id``.

Without a tokenizer, token counts are estimated as ceil(UTF-8 bytes / 4) - OpenAI's rule of
thumb that one token is about four characters of English text (OpenAI help centre, "What are
tokens and how to count them?"); ``spec["token_counts"]`` says so. Messages are rendered as
``<|role|>\\n`` + content + ``\\n`` so turn ``k+1``'s prompt starts with turn ``k``'s bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.workload.stream import Workload
from kvscope.workload.traces.rows import BadRow, RowPolicy, as_float, as_tokens, read_text

#: Bytes per token for the estimate (OpenAI: ~4 characters of English text per token).
BYTES_PER_TOKEN = 4
_ROLE = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "system": "system",
}


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``: ceil(UTF-8 bytes / 4), at least 1."""
    return max(1, -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN))


def render(role: str, content: str) -> str:
    """One message as it appears inside a prompt."""
    return f"<|{role}|>\n{content}\n"


def _messages(row: dict[str, Any]) -> list[tuple[str, str]]:
    raw = row.get("conversations", row.get("messages"))
    if not isinstance(raw, list):
        raise BadRow("field 'conversations'/'messages' must be a list")
    out = []
    for m in raw:
        if not isinstance(m, dict):
            raise BadRow("a message must be an object")
        role = _ROLE.get(str(m.get("from", m.get("role", ""))).lower())
        text = m.get("value", m.get("content"))
        if role is None or not isinstance(text, str):
            raise BadRow(
                "a message needs a known role ('from'/'role') and text ('value'/'content')"
            )
        out.append((role, text))
    return out


def _rows(path: Path) -> list[tuple[int | str, Any]]:
    text = read_text(path)
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise KvscopeError(f"{path}:{err.lineno}: not valid JSON ({err.msg}).") from None
        except RecursionError:
            raise KvscopeError(f"{path}: JSON nested too deeply to be a trace.") from None
        return [(f"[{i}]", r) for i, r in enumerate(doc)]
    out: list[tuple[int | str, Any]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append((n, json.loads(line)))
            except json.JSONDecodeError as err:
                out.append((n, BadRow(f"not valid JSON ({err.msg})")))
            except RecursionError:
                out.append((n, BadRow("JSON nested too deeply")))
    return out


def _requests_of(row: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(prompt text, answer text or None) for each request the row stands for."""
    if "prompt" in row:
        if not isinstance(row["prompt"], str):
            raise BadRow("field 'prompt' must be text")
        answer = row.get("response", row.get("completion"))
        return [(render("user", row["prompt"]), answer if isinstance(answer, str) else None)]
    msgs = _messages(row)
    if "conversations" in row:  # a whole conversation: one request per answered turn
        out: list[tuple[str, str | None]] = []
        prompt = ""
        for role, content in msgs:
            if role == "assistant":
                if not prompt:
                    raise BadRow("an assistant message comes before any prompt")
                out.append((prompt, content))
            prompt += render(role, content)
        if msgs and msgs[-1][0] != "assistant":
            out.append((prompt, None))
        return out
    # a chat log row is one request as sent; earlier messages are its history
    if msgs and msgs[-1][0] == "assistant":
        return [("".join(render(r, c) for r, c in msgs[:-1]), msgs[-1][1])]
    return [("".join(render(r, c) for r, c in msgs), None)]


def load_sharegpt(path: Path, *, skip_bad: bool = False) -> Workload:
    """Read a ShareGPT-style JSON/JSONL file or a chat/prompt log with text."""
    policy = RowPolicy(path, skip_bad)
    recs: list[tuple[float, int, int, str, str, int, str]] = []
    unanswered = 0
    timed = 0
    turns_seen: dict[str, int] = {}
    for where, row in _rows(path):
        try:
            if isinstance(row, BadRow):
                raise row
            if not isinstance(row, dict):
                raise BadRow("a row must be a JSON object")
            t_raw = row.get("arrival_s", row.get("timestamp"))
            t = 0.0 if t_raw is None else as_float(t_raw, "timestamp")
            sid = str(row.get("session_id", row.get("id", where)))
            reqs = _requests_of(row)
            got: list[tuple[float, int, int, str, str, int, str]] = []
            for k, (prompt, answer) in enumerate(reqs):
                last = k == len(reqs) - 1
                if not prompt:
                    raise BadRow("a request with an empty prompt")
                if last and "output_tokens" in row:
                    out = as_tokens(row["output_tokens"], "output_tokens", 1)
                elif answer is not None:
                    out = estimate_tokens(answer)
                else:
                    unanswered += 1
                    continue
                if last and "prompt_tokens" in row:
                    ptok = as_tokens(row["prompt_tokens"], "prompt_tokens", 1)
                else:
                    ptok = estimate_tokens(prompt)
                turn = turns_seen.get(sid, 0) + len(got)
                got.append((t, ptok, out, prompt, sid, turn, f"{sid}.{turn}"))
            recs.extend(got)
            turns_seen[sid] = turns_seen.get(sid, 0) + len(got)
            timed += t_raw is not None
        except BadRow as err:
            policy.bad(where, str(err))
    spec: dict[str, Any] = {
        "source": "trace",
        "format": "sharegpt",
        "path": str(path),
        "token_counts": f"estimated as ceil(utf8_bytes / {BYTES_PER_TOKEN}) unless given",
        "unanswered_turns": unanswered,
        "has_arrival_times": timed > 0,
    }
    spec.update(policy.summary())
    arr = np.asarray([r[0] for r in recs], dtype=np.float64)
    if len(arr):
        arr = arr - arr.min()
    return Workload.build(
        arr,
        [r[1] for r in recs],
        [r[2] for r in recs],
        request_ids=[r[6] for r in recs],
        session_ids=[r[4] for r in recs],
        turns=[r[5] for r in recs],
        prompt_texts=[r[3] for r in recs],
        spec=spec,
    )
