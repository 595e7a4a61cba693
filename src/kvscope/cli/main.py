"""Entry point of the ``kvscope`` command.

Sub-commands live in their own modules and are registered here. ``main`` is the console
script: it turns :class:`kvscope.errors.KvscopeError` into one line on stderr and exit
code 2, so bad input never shows a traceback.
"""

from __future__ import annotations

import sys

import typer

from kvscope import __version__
from kvscope.cli.help_format import CONTEXT_SETTINGS, PanelGroup
from kvscope.cli.params import Abort, ClickException, NoArgsIsHelpError, UsageError, harden
from kvscope.errors import KvscopeError
from kvscope.redact import redact_text

_app = typer.Typer(
    name="kvscope",
    help="See under the hood of LLM serving: GPU memory, the paged KV cache and communication.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help for every command: flag names in full at any width (help_format.py).
    rich_markup_mode=None,
    cls=PanelGroup,
    context_settings=CONTEXT_SETTINGS,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvscope {__version__}")
        raise typer.Exit()


@_app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """See under the hood of LLM serving: GPU memory, the paged KV cache and communication."""


# --help groups commands by where they sit in a deployment's life.
START, PLAN, LIVE, DIAGNOSE, SHOW = (
    "Start here",
    "Before deploying: plan and what-if (no GPU needed)",
    "Live servers and production",
    "When memory, communication or the host misbehave",
    "Show others",
)
#: Every command: name, module under kvscope.cli, attribute, whether it is a group (a
#: Typer app) and its help panel, in the order --help lists them. A module is imported only
#: when its command runs (or a listing needs them all): ``kvscope plan`` would otherwise pay
#: for the imports of watch, bench, alerts and the rest on every call.
COMMANDS = (
    ("demo", "demo", "demo", False, START),
    ("plan", "plan", "plan", False, PLAN),
    ("simulate", "simulate", "simulate", False, PLAN),
    ("calibrate", "calibrate", "calibrate", False, PLAN),
    ("tune", "tune", "tune", False, PLAN),
    ("workload", "workload", "app", True, PLAN),
    ("models", "models", "app", True, PLAN),
    ("gpus", "gpus", "gpus", False, PLAN),
    ("bench", "bench", "bench", False, LIVE),
    ("mock-server", "mock_server", "mock_server", False, LIVE),
    ("watch", "watch", "watch", False, LIVE),
    ("alerts", "alerts", "app", True, LIVE),
    ("dashboards", "dashboards", "app", True, LIVE),
    ("telemetry", "telemetry", "app", True, LIVE),
    ("dmon", "dmon", "app", True, LIVE),
    ("memtrace", "memtrace", "app", True, DIAGNOSE),
    ("comm", "comm", "app", True, DIAGNOSE),
    ("doctor", "doctor", "doctor", False, DIAGNOSE),
    ("report", "report", "report", False, SHOW),
)
_NAMES = {c[0] for c in COMMANDS}
_registered: set[str] = set()


def _register(names: set[str] | None = None) -> typer.Typer:
    """``app`` with the commands ``names`` (default: all) registered, each once, in order."""
    import importlib

    if names is None and _registered and _registered != _NAMES:
        # a process that ran one command and now needs them all: start over, so the
        # listing keeps COMMANDS' order whatever ran first
        _app.registered_commands.clear()
        _app.registered_groups.clear()
        _registered.clear()
    for name, module, attr, group, panel in COMMANDS:
        if (names is not None and name not in names) or name in _registered:
            continue
        obj = getattr(importlib.import_module(f"kvscope.cli.{module}"), attr)
        if group:
            _app.add_typer(obj, name=name, rich_help_panel=panel, cls=PanelGroup)
        else:
            _app.command(name, rich_help_panel=panel)(obj)
        _registered.add(name)
    return _app


def _invoked(argv: list[str]) -> str | None:
    """The command the arguments name, when they name one before any top-level option."""
    for arg in argv:
        if arg.startswith("-"):
            return None  # --help, --version: the listing needs every command
        return arg if arg in _NAMES else None
    return None


def __getattr__(name: str) -> object:
    if name == "app":  # the Typer app with every command registered (tests, docs)
        return _register()
    raise AttributeError(name)


def build_command(argv: list[str] | None = None) -> typer.core.TyperGroup:
    """The click command tree ``kvscope`` runs, numeric flags checked (see params.py): every
    command, or with ``argv`` naming one, that command alone (the others are not imported)."""
    only = _invoked(argv) if argv is not None else None
    if only is None or _registered - {only}:
        _register()  # a listing, or an app that already holds others: keep it whole
    else:
        _register({only})
    command = harden(typer.main.get_command(_app))
    assert isinstance(command, typer.core.TyperGroup)
    return command


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: run the app, mapping user errors to one stderr line."""
    args = sys.argv[1:] if argv is None else list(argv)
    command = build_command(args)
    try:
        rv = command.main(args=argv, prog_name="kvscope", standalone_mode=False)
    except NoArgsIsHelpError as err:
        # A group or command called bare shows its help, as --help would.
        if err.ctx is not None:
            typer.echo(err.ctx.get_help())
        sys.exit(2)
    except UsageError as err:
        where = _command_path(command, sys.argv[1:] if argv is None else argv)
        sys.stderr.write(f"kvscope: error: {redact_text(usage_line(err, where))}\n")
        sys.exit(2)
    except ClickException as err:
        sys.stderr.write(f"kvscope: error: {redact_text(err.format_message())}\n")
        sys.exit(err.exit_code)
    except Abort:
        sys.stderr.write("kvscope: interrupted\n")
        sys.exit(130)
    except KvscopeError as err:
        sys.stderr.write(f"kvscope: error: {redact_text(err.one_line())}\n")
        _exit_after_error(err.exit_code, console=argv is None)
    except KeyboardInterrupt:
        sys.stderr.write("kvscope: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


def _exit_after_error(code: int, console: bool) -> None:
    """Exit with ``code`` after the one error line.

    As the console script, leave at once (``os._exit``, streams flushed): every writer has
    closed on the way out, and interpreter teardown with pyarrow's or DuckDB's worker threads
    still alive can abort ("terminate called without an active exception", exit 134) after
    the error was printed, turning exit 2 into a crash. Called in-process, exit normally.
    """
    if console:
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def usage_line(err: UsageError, where: str = "kvscope") -> str:
    """An option-parser error as one line plus where to look, like other CLIs print it."""
    message = " ".join(err.format_message().split())
    if not message.endswith((".", "?", "!")):
        message += "."
    path = err.ctx.command_path if err.ctx is not None else where
    return f"{message} Try '{path} --help'."


def _command_path(command: object, args: list[str]) -> str:
    """``kvscope workload generate`` for the sub-command the leading words name."""
    words = ["kvscope"]
    for arg in args:
        subs = getattr(command, "commands", None)
        if not subs or arg not in subs:
            break
        command = subs[arg]
        words.append(arg)
    return " ".join(words)


if __name__ == "__main__":  # pragma: no cover
    main()
