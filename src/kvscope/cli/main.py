"""Entry point of the ``kvscope`` command.

Sub-commands live in their own modules and are registered here. ``main`` is the console
script: it turns :class:`kvscope.errors.KvscopeError` into one line on stderr and exit
code 2, so bad input never shows a traceback.
"""

from __future__ import annotations

import sys

import typer

from kvscope import __version__
from kvscope.cli import (
    alerts,
    bench,
    calibrate,
    comm,
    dashboards,
    demo,
    dmon,
    doctor,
    gpus,
    memtrace,
    mock_server,
    models,
    plan,
    report,
    simulate,
    telemetry,
    tune,
    watch,
    workload,
)
from kvscope.cli.help_format import CONTEXT_SETTINGS, PanelGroup
from kvscope.cli.params import Abort, ClickException, NoArgsIsHelpError, UsageError, harden
from kvscope.errors import KvscopeError
from kvscope.redact import redact_text

app = typer.Typer(
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


@app.callback()
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
app.command("demo", rich_help_panel=START)(demo.demo)
app.command("plan", rich_help_panel=PLAN)(plan.plan)
app.command("simulate", rich_help_panel=PLAN)(simulate.simulate)
app.command("calibrate", rich_help_panel=PLAN)(calibrate.calibrate)
app.command("tune", rich_help_panel=PLAN)(tune.tune)
app.add_typer(workload.app, name="workload", rich_help_panel=PLAN, cls=PanelGroup)
app.add_typer(models.app, name="models", rich_help_panel=PLAN, cls=PanelGroup)
app.command("gpus", rich_help_panel=PLAN)(gpus.gpus)
app.command("bench", rich_help_panel=LIVE)(bench.bench)
app.command("mock-server", rich_help_panel=LIVE)(mock_server.mock_server)
app.command("watch", rich_help_panel=LIVE)(watch.watch)
app.add_typer(alerts.app, name="alerts", rich_help_panel=LIVE, cls=PanelGroup)
app.add_typer(dashboards.app, name="dashboards", rich_help_panel=LIVE, cls=PanelGroup)
app.add_typer(telemetry.app, name="telemetry", rich_help_panel=LIVE, cls=PanelGroup)
app.add_typer(dmon.app, name="dmon", rich_help_panel=LIVE, cls=PanelGroup)
app.add_typer(memtrace.app, name="memtrace", rich_help_panel=DIAGNOSE, cls=PanelGroup)
app.add_typer(comm.app, name="comm", rich_help_panel=DIAGNOSE, cls=PanelGroup)
app.command("doctor", rich_help_panel=DIAGNOSE)(doctor.doctor)
app.command("report", rich_help_panel=SHOW)(report.report)


def build_command() -> typer.core.TyperGroup:
    """The click command tree ``kvscope`` runs, numeric flags checked (see params.py)."""
    command = harden(typer.main.get_command(app))
    assert isinstance(command, typer.core.TyperGroup)
    return command


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: run the app, mapping user errors to one stderr line."""
    command = build_command()
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
