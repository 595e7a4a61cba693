"""Entry point of the ``kvscope`` command.

Sub-commands live in their own modules and are registered here. ``main`` is the console
script: it turns :class:`kvscope.errors.KvscopeError` into one line on stderr and exit
code 2, so bad input never shows a traceback.
"""

from __future__ import annotations

import sys

import typer

from kvscope import __version__
from kvscope.cli import bench, gpus, models, report, workload
from kvscope.errors import KvscopeError

app = typer.Typer(
    name="kvscope",
    help="See under the hood of LLM serving: GPU memory, the paged KV cache and communication.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


app.add_typer(models.app, name="models")
app.command("gpus")(gpus.gpus)
app.command("report")(report.report)
app.add_typer(workload.app, name="workload")
app.command("bench")(bench.bench)
app.command("mock-server")(bench.mock_server)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: run the app, mapping user errors to one stderr line."""
    try:
        app(args=argv, prog_name="kvscope")
    except KvscopeError as err:
        sys.stderr.write(f"kvscope: error: {err.one_line()}\n")
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("kvscope: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    main()
