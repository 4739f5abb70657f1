"""The ``gcbench`` command line.

Every :class:`gcbench.errors.GCBenchError` becomes one line on stderr and its exit
code (2 for plan errors); no traceback is shown for them.
"""

from __future__ import annotations

import sys

import typer

from gcbench.errors import GCBenchError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="GC-Bench: energy benchmarks of GPU ML work.")
plan_app = typer.Typer(no_args_is_help=True, help="Validate and expand plans.")
app.add_typer(plan_app, name="plan")


def main() -> None:
    """Entry point of the ``gcbench`` script."""
    try:
        app(standalone_mode=False)
    except GCBenchError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except (typer.BadParameter, typer.Exit) as exc:  # pragma: no cover - typer's own handling
        raise exc
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - click's usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
