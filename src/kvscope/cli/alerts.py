"""``kvscope alerts``: check rules against a stored history; export them to Prometheus."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from kvscope.cli.output import print_json, stderr, stdout
from kvscope.cli.telemetry import shown
from kvscope.errors import KvscopeError
from kvscope.validate import writable_dir

#: A Kubernetes namespace: an RFC 1123 label (lower-case alphanumerics and '-', 63 at most).
_NAMESPACE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")

app = typer.Typer(help="Tiered alert rules: replay, list, export.", no_args_is_help=True)

_RULES_HELP = "Rule file (YAML); default: kvscope's default pack."


@app.command("check")
def check(
    store: Path = typer.Option(..., "--store", help="Telemetry store (DuckDB) to replay."),
    rules: Path | None = typer.Option(None, "--rules", help=_RULES_HELP),
    since: str = typer.Option("0", "--since", help="Evaluate from: 15m, 2h, 7d ago or Unix time."),
    until: float | None = typer.Option(
        None,
        "--until",
        help="Evaluate up to this Unix time.",
        show_default="the newest sample in the store",
    ),
    run_actions: bool = typer.Option(
        False, "--run-actions", help="Also run each tier's actions (log, webhook, command)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the events as JSON."),
) -> None:
    """Replay the stored series through the rules and print what fired when."""
    from kvscope.alerts.actions import dispatch, iso
    from kvscope.alerts.evaluate import load_store, replay
    from kvscope.alerts.loader import load_pack
    from kvscope.cli.telemetry import parse_since

    pack = load_pack(rules)
    since_s = parse_since(since) if since != "0" else 0.0
    data = load_store(str(store), pack, since_s)
    result = replay(pack, data, since_s if since_s > 0 else None, until)
    if run_actions:
        for ev in result.events:
            for res in dispatch(ev, pack, write=lambda line: stderr.print(line)):
                if not res.ok:
                    stderr.print(f"kvscope: warning: {res.kind} action failed: {res.detail}")
    events: list[dict[str, Any]] = [
        {
            "t_s": e.t_s,
            "time": iso(e.t_s),
            "alertname": e.alertname,
            "tier": str(e.tier),
            "state": e.state,
            "labels": dict(e.labels),
            "value": e.value,
            "threshold": e.threshold,
        }
        for e in result.events
    ]
    if json_out:
        print_json(
            {
                "store": shown(store),
                "rules": shown(pack.source),
                "start_s": result.start_s,
                "end_s": result.end_s,
                "steps": result.steps,
                "events": events,
            }
        )
        return
    from rich.table import Table

    table = Table(
        title=f"{len(events)} alert state changes · {result.steps} evaluations "
        f"{iso(result.start_s)} .. {iso(result.end_s)}"
    )
    for col in ("time (UTC)", "alert", "tier", "state", "labels", "value", "threshold"):
        table.add_column(col, justify="right" if col in ("value", "threshold") else "left")
    for e in events:
        labels = ",".join(f"{k}={v}" for k, v in e["labels"].items())
        table.add_row(
            e["time"],
            e["alertname"],
            e["tier"],
            e["state"],
            labels,
            f"{e['value']:.4g}",
            f"{e['threshold']:.4g}",
        )
    stdout.print(table)


@app.command("list")
def list_rules(
    rules: Path | None = typer.Option(None, "--rules", help=_RULES_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the rules as JSON."),
) -> None:
    """Show the rules of a pack: what they watch, when they fire, and why."""
    from kvscope.alerts.export import rule_expr
    from kvscope.alerts.loader import load_pack
    from kvscope.alerts.model import format_duration

    pack = load_pack(rules)
    rows = [
        {
            "name": r.name,
            "tier": str(r.tier),
            "signal": r.signal,
            "kind": str(r.kind),
            "condition": f"{r.op} {r.threshold:g}",
            "for": format_duration(r.for_s),
            "escalate_after": r.escalate_after,
            "why": r.why,
            "promql": rule_expr(r, pack),
        }
        for r in pack.rules
    ]
    if json_out:
        print_json(rows)
        return
    from rich.table import Table

    table = Table(title=f"{len(rows)} rules from {shown(pack.source)}")
    for col in ("name", "tier", "signal", "kind", "condition", "for", "why"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            *(str(r[c]) for c in ("name", "tier", "signal", "kind", "condition", "for", "why"))
        )
    stdout.print(table)


@app.command("export")
def export(
    fmt: str = typer.Option("prometheus", "--format", help="prometheus (rule file) or k8s."),
    rules: Path | None = typer.Option(None, "--rules", help=_RULES_HELP),
    out: Path | None = typer.Option(
        None, "--out", help="Directory to write into (default: print the rules to stdout)."
    ),
    tests: bool = typer.Option(
        False, "--tests", help="Also write a `promtool test rules` file (needs --out)."
    ),
    dense: bool = typer.Option(False, "--dense", help="Tests check every evaluation step."),
    namespace: str = typer.Option("", "--namespace", help="k8s: metadata.namespace."),
    json_out: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write the pack as a Prometheus rule file or a PrometheusRule CRD (and promtool tests)."""
    from kvscope.alerts.export import prometheus_rule_crd, rule_file
    from kvscope.alerts.loader import load_pack
    from kvscope.alerts.scenarios import write_promtool_tests

    if fmt not in ("prometheus", "k8s"):
        raise KvscopeError(f"unknown export format '{fmt}'.", "Use prometheus or k8s.")
    if namespace and not _NAMESPACE.fullmatch(namespace):
        raise KvscopeError(
            f"--namespace {namespace[:40]!r} is not a Kubernetes namespace.",
            "Use lower-case letters, digits and '-' (at most 63), e.g. monitoring.",
        )
    if out is not None:
        writable_dir(out, "rule export directory")  # before any work, and in one line
    pack = load_pack(rules)
    text = (
        rule_file(pack) if fmt == "prometheus" else prometheus_rule_crd(pack, namespace=namespace)
    )
    if out is None:
        if tests:
            raise KvscopeError("--tests needs --out DIR (the test file names the rule file).")
        typer.echo(text, nl=False)
        return
    written: dict[str, object] = {"format": fmt, "rules": len(pack.rules)}
    main = out / ("kvscope-rules.yml" if fmt == "prometheus" else "kvscope-prometheusrule.yaml")
    try:
        out.mkdir(parents=True, exist_ok=True)
        main.write_text(text)
        written["file"] = shown(main)
        if tests:
            plain = out / "kvscope-rules.yml"
            if fmt != "prometheus":
                plain.write_text(rule_file(pack))  # promtool reads plain rule files, not CRDs
            test_path = out / "kvscope-rules.test.yml"
            written["tests"] = write_promtool_tests(pack, plain, test_path, dense)
            written["test_file"] = shown(test_path)
    except OSError as err:
        where = err.filename or out
        raise KvscopeError(f"{where}: cannot write the rules ({err.strerror}).") from None
    if json_out:
        print_json(written)
    else:
        stdout.print(f"wrote {shown(main)}" + (f" and {written['test_file']}" if tests else ""))
