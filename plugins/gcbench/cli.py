"""The ``gcbench`` command line.

Every :class:`gcbench.errors.GCBenchError` becomes one line on stderr and its exit
code (2 for plan errors); no traceback is shown for them.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from gcbench.errors import GCBenchError, StoreError

class Runner(str, Enum):
    """Where trials run."""

    local = "local"
    docker = "docker"


app = typer.Typer(add_completion=False, no_args_is_help=True, help="GC-Bench: energy benchmarks of GPU ML work.")
plan_app = typer.Typer(no_args_is_help=True, help="Validate and expand plans.")
app.add_typer(plan_app, name="plan")

from gcbench.tokenizer.cli import tokenize_command, tokenizer_app  # noqa: E402 - next to the other sub-apps

app.add_typer(tokenizer_app, name="tokenizer")
app.command("tokenize")(tokenize_command)


@plan_app.command("validate")
def plan_validate(file: Path = typer.Argument(..., help="Plan YAML file.")) -> None:
    """Check a plan; exit 0 if valid, 2 with file:line: field: message if not."""
    from gcbench.plan import expand, load_plan

    plan = load_plan(file)
    n = len(expand(plan))
    typer.echo(f"{file}: plan {plan.name!r} is valid ({n} trials, dag_id {plan.dag_id})")


@plan_app.command("expand")
def plan_expand(
    file: Path = typer.Argument(..., help="Plan YAML file."),
    as_json: bool = typer.Option(False, "--json", help="Print the trial specs as JSON."),
    repetitions: Optional[int] = typer.Option(None, help="Override the repetitions."),
) -> None:
    """List the trials a plan expands to (schedule order), as a table or JSON."""
    from gcbench.plan import expand, load_plan

    plan = load_plan(file)
    specs = expand(plan, repetitions=repetitions)
    if as_json:
        typer.echo(json.dumps([s.model_dump(mode="json") for s in specs], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from rich.markup import escape

    table = Table(title=escape(f"{plan.name}: {len(specs)} trials ({plan.order} order)"))
    for col in ("#", "trial id", "variant", "rep", "kind", "devices", "seed"):
        table.add_column(col)
    for s in specs:
        table.add_row(str(s.order), s.trial_id, escape(s.variant), str(s.repetition), s.kind, ",".join(map(str, s.devices)), str(s.seed))
    console = Console()
    if not console.is_terminal:  # piped: no wrapping or cut-off ids
        console = Console(width=max(120, max((len(s.variant) for s in specs), default=0) + 80))
    console.print(table)


@app.command("run")
def run_plan(
    plan_file: Path = typer.Argument(..., help="Plan YAML file."),
    runner: Optional[Runner] = typer.Option(None, help="Runner (default: the plan's)."),
    repetitions: Optional[int] = typer.Option(None, help="Override the repetitions."),
    variant: Optional[list[str]] = typer.Option(None, help="Run only this variant (repeatable)."),
) -> None:
    """Run a plan's DAG in-process (Airflow dag.test()) and print the report's path."""
    from gcbench.runprogress import run_with_progress

    code = run_with_progress(plan_file, runner.value if runner else None, repetitions, variant or [])
    if code:
        raise typer.Exit(code)


@app.command("report")
def report_cmd(
    run_id: str = typer.Argument(..., help="Airflow run id (see the run's output or the UI)."),
    plan: Optional[str] = typer.Option(None, help="Plan name, when several plans have this run id."),
    paper: bool = typer.Option(False, "--paper", help="Also write the study's headline tables "
                               "(paper.md, paper.tex: LaTeX booktabs) and print their paths."),
) -> None:
    """Write (again) the report of a stored run and print its path."""
    from gcbench.plan.schema import Plan as PlanModel
    from gcbench.report.build import report_run
    from gcbench.store import db

    with db.connection() as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT p.plan FROM dag_runs r JOIN plans p ON p.plan_name = r.plan_name "
                        "WHERE r.run_id = %s AND (%s::text IS NULL OR r.plan_name = %s)", (run_id, plan, plan))
            rows = cur.fetchall()
    if not rows:
        raise StoreError(f"no stored run {run_id!r}" + (f" of plan {plan!r}" if plan else ""))
    if len(rows) > 1:
        raise StoreError(f"run id {run_id!r} exists for several plans; give --plan")
    path = report_run(PlanModel.model_validate(rows[0][0]), run_id, paper=paper)
    typer.echo(str(path))
    if paper:
        typer.echo(str(path.with_name("paper.md")))
        typer.echo(str(path.with_name("paper.tex")))


@app.command("doctor")
def doctor_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    rapl_root: str = typer.Option("/sys/class/powercap", help="powercap tree to probe for RAPL."),
) -> None:
    """What this machine can measure (NVML, nvidia-smi, RAPL, Docker, GPU mapping) and why not."""
    from gcbench.energy import doctor

    findings = doctor.diagnose(rapl_root=rapl_root)
    typer.echo(json.dumps(findings, indent=2, default=str) if as_json else doctor.format_text(findings))


@app.command("runs")
def runs_cmd(plan: Optional[str] = typer.Option(None, help="Only this plan's runs."),
             limit: int = typer.Option(20, help="How many of the newest runs.")) -> None:
    """List stored DAG runs (newest first) with their trials and report path."""
    from gcbench.store import db

    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT r.plan_name, r.run_id, r.logical_date, count(t.id), count(t.id) FILTER (WHERE t.valid), "
            "count(t.id) FILTER (WHERE t.status = 'failed'), rep.html_path FROM dag_runs r "
            "LEFT JOIN trials t ON t.dag_run_id = r.id LEFT JOIN reports rep ON rep.dag_run_id = r.id "
            "WHERE (%s::text IS NULL OR r.plan_name = %s) GROUP BY r.id, rep.html_path "
            "ORDER BY r.created_at DESC LIMIT %s", (plan, plan, limit))
        rows = cur.fetchall()
    if not rows:
        typer.echo("no stored runs" + (f" of plan {plan!r}" if plan else ""))
        return
    for plan_name, run_id, logical, n, valid, failed, html in rows:
        when = logical.isoformat() if logical else "-"
        typer.echo(f"{plan_name}\t{run_id}\tlogical {when}\t{n} trials, {valid} valid, {failed} failed\t{html or 'no report'}")


def main() -> None:
    """Entry point of the ``gcbench`` script.

    Exit status: 0 ok; 1 a GC-Bench error (one line on stderr) or a failed run; 2 a plan
    error or a usage error; 130 interrupted.
    """
    try:
        code = app(standalone_mode=False)
    except GCBenchError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: bad option value, unknown command, missing argument
        if hasattr(exc, "show"):
            exc.show()
        else:
            typer.echo(f"error: {exc}", err=True)
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
