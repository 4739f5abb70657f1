"""The ``gcbench`` command line.

Every :class:`gcbench.errors.GCBenchError` becomes one line on stderr and its exit
code (2 for plan errors); no traceback is shown for them.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path

import typer

from gcbench.errors import GCBenchError, StoreError

CLI_PARAM_NAMES = {"repetitions": "--repetitions", "variants": "--variant", "runner": "--runner"}
"""How errors of :func:`gcbench.plan.params.run_params` name the run parameters' flags."""


def say_database() -> None:
    """One line on stderr naming the results database (and home) this command uses, so
    results never come silently from another folder's database (issue 20, item 11)."""
    from gcbench.store import db

    typer.echo(f"using {db.describe()}", err=True)


class Runner(StrEnum):
    """Where trials run."""

    local = "local"
    docker = "docker"


app = typer.Typer(add_completion=False, no_args_is_help=True, help="GC-Bench: energy benchmarks of GPU ML work.")
plan_app = typer.Typer(no_args_is_help=True, help="Validate and expand plans.")
app.add_typer(plan_app, name="plan")

from gcbench.tokenizer.cli import tokenize_command, tokenizer_app  # noqa: E402 - next to the other sub-apps

app.add_typer(tokenizer_app, name="tokenizer")
app.command("tokenize")(tokenize_command)

airflow_app = typer.Typer(no_args_is_help=True, help="A local Airflow for the web UI: up, down.")
app.add_typer(airflow_app, name="airflow")


@airflow_app.command("up")
def airflow_up(
    port: int = typer.Option(8080, help="Port of the UI and API on 127.0.0.1."),
    timeout: float = typer.Option(240, help="Seconds to wait for the UI to answer."),
) -> None:
    """Start Airflow for the UI in the background: AIRFLOW_HOME under .gcbench/airflow, the
    project's dags/, databases, one pool per GPU of every plan, api-server, scheduler,
    dag-processor and triggerer. Prints the URL and where the admin password is."""
    from gcbench.airflow_local import up

    info = up(port=port, timeout_s=timeout, log=typer.echo)
    if info.already_running:
        typer.echo(f"already running: {info.url} (gcbench airflow down stops it)")
    typer.echo(f"Airflow UI: {info.url}  user admin, password in {info.password_file}")
    typer.echo(
        f"for airflow commands: export AIRFLOW_HOME={info.home}   (new DAGs start paused: "
        "airflow dags unpause gcbench__<plan>, or trigger from the UI)"
    )
    typer.echo("stop everything it started: gcbench airflow down")


@airflow_app.command("down")
def airflow_down(grace: float = typer.Option(20, help="Seconds between SIGTERM and SIGKILL.")) -> None:
    """Stop everything `gcbench airflow up` started (services, running tasks and trials,
    the embedded database it kept up) and wait until they have ended."""
    from gcbench.airflow_local import down

    down(grace_s=grace, log=typer.echo)


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
    repetitions: int | None = typer.Option(None, help="Override the repetitions."),
) -> None:
    """List the trials a plan expands to (schedule order), as a table or JSON."""
    from gcbench.plan import expand, load_plan
    from gcbench.plan.params import run_params

    plan = load_plan(file)
    checked = run_params(plan, repetitions=repetitions, names=CLI_PARAM_NAMES)
    specs = expand(plan, repetitions=checked.repetitions)
    if as_json:
        typer.echo(json.dumps([s.model_dump(mode="json") for s in specs], indent=2))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"{plan.name}: {len(specs)} trials ({plan.order} order)"))
    for col in ("#", "trial id", "variant", "rep", "kind", "devices", "seed"):
        table.add_column(col)
    for s in specs:
        table.add_row(
            str(s.order),
            s.trial_id,
            escape(s.variant),
            str(s.repetition),
            s.kind,
            ",".join(map(str, s.devices)),
            str(s.seed),
        )
    console = Console()
    if not console.is_terminal:  # piped: no wrapping or cut-off ids
        console = Console(width=max(120, max((len(s.variant) for s in specs), default=0) + 80))
    console.print(table)
    if plan.has_target and not checked.repetitions:
        console.print(
            "Precision targets: these are the first round (min repetitions per variant); "
            "a second round adds what each group's first round asks for, up to max."
        )


@app.command("run")
def run_plan(
    plan_file: Path = typer.Argument(..., help="Plan YAML file."),
    runner: Runner | None = typer.Option(None, help="Runner (default: the plan's)."),
    repetitions: int | None = typer.Option(None, help="Override the repetitions."),
    variant: list[str] | None = typer.Option(None, help="Run only this variant (repeatable)."),
) -> None:
    """Run a plan's DAG in-process (Airflow dag.test()) and print the report's path.

    The flags are checked as a trigger's parameters are (gcbench.plan.params), before
    any DAG runs: a bad one exits 2 with one line.
    """
    from gcbench.plan import load_plan
    from gcbench.plan.params import run_params
    from gcbench.runprogress import run_with_progress

    checked = run_params(
        load_plan(plan_file), repetitions, variant or None, runner.value if runner else None, names=CLI_PARAM_NAMES
    )
    say_database()
    code = run_with_progress(plan_file, runner.value if runner else None, checked.repetitions, list(checked.variants))
    if code:
        raise typer.Exit(code)


def find_run(conn, run: str, plan: str | None = None) -> tuple[str, str, dict]:
    """``(plan name, run id, plan JSON)`` of the stored run ``run`` names.

    ``run`` is a run id (``manual__2026-11-29T23:31:50.116326+00:00``) or the name of
    the run's folder under ``reports/<plan>/`` and ``runs/<plan>/``
    (:func:`gcbench.config.run_key` of the run id, ``manual__2026-11-29T23_31_50...``),
    or a path to that folder.

    Raises:
        StoreError: no stored run, or several (of several plans: give ``plan``).
    """
    from gcbench import config

    candidates = [run]
    if "/" in run or "\\" in run:
        candidates.append(Path(run).name)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT r.plan_name, r.run_id, p.plan FROM dag_runs r JOIN plans p ON p.plan_name = r.plan_name "
            "WHERE (%s::text IS NULL OR r.plan_name = %s) ORDER BY r.created_at",
            (plan, plan),
        )
        rows = cur.fetchall()
    found = [row for row in rows if row[1] == run]
    if not found:
        found = [row for row in rows if config.run_key(row[1]) in candidates]
    if not found:  # a folder written before run keys were injective (7655493): may name several runs
        found = [row for row in rows if config.legacy_run_key(row[1]) in candidates]
    if not found:
        raise StoreError(f"no stored run {run!r}" + (f" of plan {plan!r}" if plan else ""))
    if len({row[0] for row in found}) > 1:
        raise StoreError(
            f"run {run!r} exists for several plans ({', '.join(sorted({r[0] for r in found}))}); give --plan"
        )
    if len(found) > 1:
        raise StoreError(
            f"folder name {run!r} matches several runs ({', '.join(r[1] for r in found)}); give the run id"
        )
    return found[0]


@app.command("report")
def report_cmd(
    run: str = typer.Argument(
        ...,
        metavar="RUN",
        help="The run's id (see the run's output, gcbench runs or the UI) or its folder name under reports/<plan>/.",
    ),
    plan: str | None = typer.Option(None, help="Plan name, when several plans have this run."),
    paper: bool = typer.Option(
        False,
        "--paper",
        help="Also write the study's headline tables (paper.md, paper.tex: LaTeX booktabs) and print their paths.",
    ),
) -> None:
    """Write (again) the report of a stored run and print the paths of report.html and
    report.md (and with --paper, of paper.md and paper.tex)."""
    from gcbench.plan.schema import Plan as PlanModel
    from gcbench.report.build import report_run
    from gcbench.store import db

    say_database()
    with db.connection() as conn:
        _, run_id, plan_json = find_run(conn, run, plan)
    path = report_run(PlanModel.model_validate(plan_json), run_id, paper=paper)
    typer.echo(str(path))
    typer.echo(str(path.with_name("report.md")))
    if paper:
        typer.echo(str(path.with_name("paper.md")))
        typer.echo(str(path.with_name("paper.tex")))


@app.command("doctor")
def doctor_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    rapl_root: str = typer.Option("/sys/class/powercap", help="powercap tree to probe for RAPL."),
    plan: Path | None = typer.Option(
        None, "--plan", help="Also probe this plan's node meter (energy.node) and list its own preprocessors."
    ),
) -> None:
    """What this machine can measure (NVML, nvidia-smi, RAPL, the node's BMC, Docker, GPU
    mapping) and why not, the workload kinds installed here (entry-point group gcbench.workloads)
    and the declared preprocessors (built-in, and with --plan the plan's) with their toolchains."""
    from gcbench import kinds
    from gcbench.energy import doctor

    say_database()
    from gcbench.plan.loader import load_plan

    node_settings = None
    if plan is not None:
        node_settings = load_plan(plan).energy.node  # PlanError: file, line, field (the CLI's one line)
    findings = doctor.diagnose(rapl_root=rapl_root, node_settings=node_settings)
    try:
        installed: dict[str, object] = {
            name: {"description": k.description, "unit": k.unit} for name, k in kinds.registry().items()
        }
        kinds_text = "workload kinds: " + ", ".join(installed)
    except kinds.KindRegistryError as exc:  # a broken plugin is a finding, not a crash of the doctor
        installed = {"error": str(exc)}
        kinds_text = f"workload kinds: BROKEN REGISTRATION: {exc}"
    findings["workload_kinds"] = installed
    findings["preprocessors"] = _preprocessor_findings(load_plan(plan) if plan is not None else None)
    if as_json:
        typer.echo(json.dumps(findings, indent=2, default=str))
    else:
        typer.echo(
            doctor.format_text({k: v for k, v in findings.items() if k not in ("workload_kinds", "preprocessors")})
        )
        typer.echo(kinds_text)
        typer.echo("preprocessors (path: external-<name>):")
        for name, p in findings["preprocessors"].items():
            typer.echo(f"  {name}: {p['source']} (declared in {p['declared_in']}); {p['toolchain']}")


def _preprocessor_findings(plan) -> dict[str, dict[str, str]]:
    """The declared preprocessors (built-in, and the plan's with ``--plan``): where their
    sources are and whether their build command's tool is on PATH here."""
    import shutil

    from gcbench.tokenizer.errors import TokenizerBuildError
    from gcbench.tokenizer.preprocessors import declared

    out: dict[str, dict[str, str]] = {}
    try:
        found = plan.declared_preprocessors() if plan is not None else declared()
    except (TokenizerBuildError, ValueError) as exc:
        return {"error": {"toolchain": str(exc), "source": ""}}
    for name, pre in found.items():
        tool = (pre.decl.build.local or pre.decl.build.command)[0]
        out[name] = {
            "source": str(pre.source_dir),
            "declared_in": str(Path(pre.origin).resolve()) if Path(pre.origin).is_file() else pre.origin,
            "toolchain": f"{tool} found"
            if shutil.which(tool)
            else f"{tool} not on PATH (local builds fail; the docker runner builds in {pre.toolchain_image()})",
        }
    return out


export_app = typer.Typer(no_args_is_help=True, help="Export stored runs: mlflow.")
app.add_typer(export_app, name="export")


@export_app.command("mlflow")
def export_mlflow(
    run: str | None = typer.Argument(None, metavar="[RUN]", help="Run id or folder name (see gcbench runs)."),
    plan: str | None = typer.Option(None, help="Plan name, when several plans have this run."),
    tracking_uri: str | None = typer.Option(
        None, help="MLflow server URL (default: the plan's export.mlflow, else GCBENCH_MLFLOW_TRACKING_URI)."
    ),
    experiment: str | None = typer.Option(None, help="Experiment name (default: the plan's, else gcbench-<plan>)."),
    pending: bool = typer.Option(False, "--pending", help="Send the exports queued after failures instead."),
) -> None:
    """Log a stored run and its trials into MLflow (parent run, one child run per trial);
    again is idempotent. Exit 1 when the server cannot be reached (the run stays stored)."""
    from gcbench.export import mlflow
    from gcbench.plan.schema import Plan as PlanModel
    from gcbench.store import db

    say_database()
    jobs: list[tuple[str, str | None, str | None, str | None]] = []
    if pending:
        jobs = [(r["run_id"], r["plan"], r["tracking_uri"], r["experiment"]) for r in mlflow.pending()]
        if not jobs:
            typer.echo("no queued MLflow exports")
            return
    elif run is None:
        raise typer.BadParameter("give RUN, or --pending")
    else:
        jobs = [(run, plan, tracking_uri, experiment)]
    failed = []
    with db.connection() as conn:
        for run_name, plan_name, uri, exp in jobs:
            plan_name, run_id, plan_json = find_run(conn, run_name, plan_name)
            model = PlanModel.model_validate(plan_json)
            target = mlflow.target_for(model)
            if uri:
                target = mlflow.MlflowTarget(
                    uri.rstrip("/"), exp or (target.experiment if target else None) or f"gcbench-{model.name}"
                )
            if target is None:
                raise StoreError(
                    "no MLflow server: give --tracking-uri, the plan's export.mlflow or GCBENCH_MLFLOW_TRACKING_URI"
                )
            try:
                out = mlflow.export_run(conn, model, run_id, target)
            except mlflow.ExportError as exc:
                failed.append((run_name, plan_name, target, str(exc)))
                typer.echo(f"error: {exc}", err=True)
                continue
            typer.echo(
                f"logged {out.trials} trial(s) of {run_id} to {target.tracking_uri}, experiment {target.experiment} "
                f"(id {out.experiment_id}), parent run {out.parent_run_id}"
            )
    if pending:
        mlflow.set_pending(
            [
                {"plan": p, "run_id": r, "tracking_uri": t.tracking_uri, "experiment": t.experiment, "reason": why}
                for r, p, t, why in failed
            ]
        )
    if failed:
        raise typer.Exit(1)


metrics_app = typer.Typer(no_args_is_help=True, help="Prometheus metrics: serve.")
app.add_typer(metrics_app, name="metrics")


@metrics_app.command("serve")
def metrics_serve(
    port: int = typer.Option(9464, help="Port of the scrape endpoint (/metrics)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
) -> None:
    """Serve live trial power and energy and the plans' latest group figures for Prometheus
    (OpenMetrics; see gcbench.export.prometheus) until Ctrl-C."""
    import time

    try:
        from gcbench.export.prometheus import serve
    except ImportError as exc:  # pragma: no cover - the export extra missing
        raise StoreError(f"prometheus_client is not installed: pip install 'gcbench[export]' ({exc})") from exc
    say_database()
    serve(port, host)
    typer.echo(f"serving http://{host}:{port}/metrics (Ctrl-C stops)")
    while True:
        time.sleep(3600)


RUNS_COLUMNS = ("plan", "run id", "logical date", "trials", "valid", "invalid", "failed", "skipped", "report")
"""The columns of ``gcbench runs`` (and the keys of ``--json``, spaces as underscores)."""


@app.command("runs")
def runs_cmd(
    plan: str | None = typer.Option(None, help="Only this plan's runs."),
    limit: int = typer.Option(20, help="How many of the newest runs."),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
) -> None:
    """List stored DAG runs (newest first): trials, valid, invalid (measured but failed
    validation), failed, skipped, and the report's path."""
    from gcbench.store import db

    say_database()
    with db.connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT r.plan_name, r.run_id, r.logical_date, count(t.id), count(t.id) FILTER (WHERE t.valid), "
            "count(t.id) FILTER (WHERE t.status = 'ok' AND t.valid = false), "
            "count(t.id) FILTER (WHERE t.status = 'failed'), count(t.id) FILTER (WHERE t.status = 'skipped'), "
            "rep.html_path FROM dag_runs r "
            "LEFT JOIN trials t ON t.dag_run_id = r.id LEFT JOIN reports rep ON rep.dag_run_id = r.id "
            "WHERE (%s::text IS NULL OR r.plan_name = %s) GROUP BY r.id, rep.html_path "
            "ORDER BY r.created_at DESC LIMIT %s",
            (plan, plan, limit),
        )
        rows = cur.fetchall()
    records = [
        dict(
            zip(
                (c.replace(" ", "_") for c in RUNS_COLUMNS),
                (plan_name, run_id, logical.isoformat() if logical else None, n, valid, invalid, failed, skipped, html),
                strict=True,
            )
        )
        for plan_name, run_id, logical, n, valid, invalid, failed, skipped, html in rows
    ]
    if as_json:
        typer.echo(json.dumps(records, indent=2))
        return
    if not rows:
        typer.echo("no stored runs" + (f" of plan {plan!r}" if plan else ""))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=escape(
            f"{len(rows)} stored run{'s' if len(rows) != 1 else ''}, newest first" + (f" (plan {plan})" if plan else "")
        )
    )
    for col in RUNS_COLUMNS:
        table.add_column(col, justify="right" if col in ("trials", "valid", "invalid", "failed", "skipped") else "left")
    cells = [
        [
            r["plan"],
            r["run_id"],
            r["logical_date"] or "-",
            *(str(r[k]) for k in ("trials", "valid", "invalid", "failed", "skipped")),
            r["report"] or "no report",
        ]
        for r in records
    ]
    for row in cells:
        table.add_row(*(escape(c) for c in row))
    console = Console()
    if not console.is_terminal:  # piped: no wrapping or cut-off ids and paths, as gcbench plan expand
        # each column as wide as its widest cell or head, plus rich's padding and borders (3 per column)
        widths = [max(len(head), *(len(row[i]) for row in cells)) for i, head in enumerate(RUNS_COLUMNS)]
        console = Console(width=sum(widths) + 3 * len(widths) + 1)
    console.print(table)


def usage_message(exc: Exception) -> str:
    """One line for a usage error: ``Invalid value for '--runner': 'dockr' is not one of
    'local', 'docker' (gcbench run --help)``."""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    message = " ".join(message.replace("Value error, ", "").split()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    return f"{message} ({ctx.command_path} --help)" if ctx is not None else message


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
        typer.echo(f"error: {usage_message(exc)}", err=True)
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
