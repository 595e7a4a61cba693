"""What an alert does when it changes state: log a line, POST a webhook, run a command.

Every action is bounded by its timeout and reports its outcome instead of raising: a broken
webhook must not stop the evaluation loop that would report the next alert. The webhook body
is one JSON object (``status``, ``alertname``, ``tier``, ``labels``, ``value``, ``threshold``,
``starts_at`` in RFC 3339 UTC, ``response_time_s``, ``summary``, ``description``). A command
runs without a shell; the alert is passed in ``KVSCOPE_ALERT_*`` environment variables.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvscope import __version__
from kvscope.alerts.evaluate import Event
from kvscope.alerts.model import Action, RulePack, format_duration
from kvscope.redact import redact_text, redact_url


@dataclass(frozen=True, slots=True)
class ActionResult:
    """Outcome of one action for one event."""

    kind: str
    ok: bool
    detail: str


def iso(t_s: float) -> str:
    return dt.datetime.fromtimestamp(t_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log_line(event: Event, pack: RulePack) -> str:
    """One line per state change, e.g. ``2026-11-29T10:00:00Z FIRING KvCacheNearFull ...``."""
    labels = ",".join(f"{k}={v}" for k, v in event.labels)
    respond = format_duration(pack.policy(event.tier).response_s)
    return (
        f"{iso(event.t_s)} {event.state.upper()} {event.alertname} tier={event.tier} "
        f"{{{labels}}} value={event.value:.6g} threshold={event.threshold:.6g} "
        f"respond_within={respond}"
    )


def payload(event: Event, pack: RulePack) -> dict[str, Any]:
    rule = pack.rule(event.rule)
    return {
        "kvscope_version": __version__,
        "status": event.state,
        "alertname": event.alertname,
        "tier": str(event.tier),
        "labels": dict(event.labels),
        "value": event.value,
        "threshold": event.threshold,
        "starts_at": iso(event.t_s),
        "response_time_s": pack.policy(event.tier).response_s,
        "summary": rule.summary,
        "description": rule.why,
    }


def _webhook(action: Action, body: dict[str, Any]) -> ActionResult:
    from kvscope.redact import basic_auth

    data = json.dumps(body).encode()
    try:
        # user:password@ in the URL becomes HTTP Basic auth (urllib would read it as a port).
        url, auth = basic_auth(action.url)
        headers = {"Content-Type": "application/json"} | ({"Authorization": auth} if auth else {})
        req = urllib.request.Request(url, data=data, method="POST", headers=headers)
        with urllib.request.urlopen(req, timeout=action.timeout_s) as resp:
            return ActionResult("webhook", 200 <= resp.status < 300, f"HTTP {resp.status}")
    except urllib.error.HTTPError as err:
        return ActionResult("webhook", False, f"HTTP {err.code}")
    except (urllib.error.URLError, OSError, ValueError, UnicodeError) as err:
        detail = f"cannot POST to {redact_url(action.url)}: {err}"
        return ActionResult("webhook", False, redact_text(detail) or detail)


def _command(action: Action, event: Event, body: dict[str, Any]) -> ActionResult:
    env = dict(os.environ)
    env.update(
        {
            "KVSCOPE_ALERT_NAME": event.alertname,
            "KVSCOPE_ALERT_STATUS": event.state,
            "KVSCOPE_ALERT_TIER": str(event.tier),
            "KVSCOPE_ALERT_VALUE": repr(event.value),
            "KVSCOPE_ALERT_LABELS": ",".join(f"{k}={v}" for k, v in event.labels),
            "KVSCOPE_ALERT_JSON": json.dumps(body),
        }
    )
    try:
        done = subprocess.run(
            list(action.command),
            env=env,
            timeout=action.timeout_s,
            capture_output=True,
            text=True,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return ActionResult("command", False, f"{action.command[0]}: {err}")
    return ActionResult("command", done.returncode == 0, f"exit {done.returncode}")


def dispatch(
    event: Event, pack: RulePack, write: Callable[[str], object] | None = None
) -> list[ActionResult]:
    """Run the actions of the event's tier; commands run on ``firing`` only."""
    out: list[ActionResult] = []
    body = payload(event, pack)
    for action in pack.policy(event.tier).actions:
        if action.kind == "log":
            line = log_line(event, pack)
            (write or (lambda s: print(s, file=sys.stderr)))(line)
            out.append(ActionResult("log", True, line))
        elif action.kind == "webhook":
            out.append(_webhook(action, body))
        elif event.state == "firing":
            out.append(_command(action, event, body))
    return out
