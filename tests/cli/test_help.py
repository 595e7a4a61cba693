"""``--help`` of every command fits an 80-column terminal and says what each flag does.

Walks the whole command tree that ``kvscope`` runs and renders each command's help at 80
columns in this process (a click context with ``terminal_width=80``): every option's longest
name appears in full, every option and argument has a description, no line is wider than the
terminal, and an option with a default shows it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from typer import _click as click

from cli_helpers import one_error_line, run_in_process
from kvscope.cli.main import build_command

WIDTH = 80
#: Commands another part of issue #21 gives descriptions and defaults to.
OTHERS = {("plan",), ("gpus",), ("report",)}


def _walk(
    cmd: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _walk(sub, (*path, name))


ROOT = build_command()
COMMANDS = list(_walk(ROOT))


def _help(path: tuple[str, ...]) -> str:
    """``kvscope PATH --help`` as it prints in an 80-column terminal."""
    cmd: click.Command = ROOT
    ctx = click.Context(ROOT, info_name="kvscope", terminal_width=WIDTH, **ROOT.context_settings)
    for name in path:
        cmd = cmd.commands[name]
        ctx = click.Context(cmd, info_name=name, parent=ctx, **cmd.context_settings)
    return cmd.get_help(ctx)


def _entries(text: str) -> dict[str, str]:
    """Each option/argument entry of the help text: its first line's names → its whole text."""
    entries: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"^  \S", line):
            current = line.strip()
            entries[current] = line
        elif current is not None and line.startswith("   "):
            entries[current] += "\n" + line
        else:
            current = None
    return entries


def _entry_for(entries: dict[str, str], name: str) -> str:
    for head, body in entries.items():
        if re.search(rf"(^|[\s,/]){re.escape(name)}($|[\s,/.])", head):
            return body
    raise AssertionError(f"{name} not in help")


def _has_default(param: click.Parameter) -> bool:
    d = param.default
    if d is None or d is False or d == "" or callable(d):
        return False
    return not (isinstance(d, list | tuple) and not d)


@pytest.mark.parametrize(
    ("path", "cmd"), COMMANDS, ids=[" ".join(p) or "kvscope" for p, _ in COMMANDS]
)
def test_help_fits_80_columns_and_describes_every_flag(
    path: tuple[str, ...], cmd: click.Command
) -> None:
    text = _help(path)
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not wide, f"lines wider than {WIDTH}: {wide}"
    assert "…" not in text
    split = re.search(r"\S*\w-\n\s+\w\S*", text)  # a word broken at a hyphen
    assert split is None, f"hyphenated word split across lines: {split.group(0)!r}"
    entries = _entries(text)
    problems = []
    for param in cmd.params:
        if getattr(param, "hidden", False):
            continue
        names = [*param.opts, *param.secondary_opts]
        longest = max(names, key=len)
        if param.param_type_name == "argument":
            longest = param.name or longest
        assert longest in text, f"{longest} cut or missing in {' '.join(path)} --help"
        body = _entry_for(entries, longest)
        if not getattr(param, "help", None):
            problems.append(f"{longest} has no description")
        if param.param_type_name == "option" and _has_default(param) and "[default:" not in body:
            problems.append(f"{longest} does not show its default {param.default!r}")
    if problems and path[:1] in {p[:1] for p in OTHERS}:
        pytest.xfail(f"issue #21: {path[0]}'s descriptions belong to another change: {problems}")
    assert not problems, "\n".join(problems)


def test_help_in_a_real_80_column_terminal_keeps_flag_names() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", "simulate", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "--tensor-parallel-size" in out.stdout
    assert "--enable-prefix-caching / --no-enable-prefix-caching" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80


def test_root_help_groups_commands_by_purpose() -> None:
    text = _help(())
    assert text.index("Start here:") < text.index("  demo ") < text.index("  simulate ")
    assert "When memory, communication or the host misbehave:" in text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("models", "show"), "Missing argument 'model'"),
        (("memtrace", "generate"), "Missing option '--out'"),
        (("telemetry", "export", "--bogus"), "No such option: --bogus"),
        (("workload", "stats", "--json", "--json=x"), "--json"),
        (("comm", "bench", "--sizes"), "requires an argument"),
    ],
)
def test_usage_errors_of_subcommands_are_one_line_naming_the_subcommand(
    args: tuple[str, ...], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run_in_process(args, capsys)
    line = one_error_line(code, err, needle)
    assert line.endswith(f"Try 'kvscope {args[0]} {args[1]} --help'."), line


@pytest.mark.parametrize(
    "path",
    [p for p, c in COMMANDS if getattr(c, "commands", None)],
    ids=lambda p: " ".join(p) or "kvscope",
)
def test_group_help_lists_each_command_with_its_whole_first_sentence(path: tuple[str, ...]) -> None:
    text = " ".join(_help(path).split())
    group = ROOT
    for name in path:
        group = group.commands[name]  # type: ignore[attr-defined]
    for name, sub in group.commands.items():  # type: ignore[attr-defined]
        first = " ".join((sub.help or "").split("\n\n")[0].split())
        sentence = first.split(". ")[0].rstrip(".")
        assert f"{name} {sentence}" in text, f"{name}: {sentence!r} cut in {' '.join(path)} --help"
