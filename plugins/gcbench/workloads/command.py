"""Kind ``command``: any program, measured from outside, its windows marked from inside.

A plan entry::

    - name: my-bench
      kind: command
      command: ["./bench", "--size", "{size}", "--out", "{outdir}/bench.txt"]
      cwd: examples/command          # relative to the project root; default: the root
      env: {OMP_NUM_THREADS: "1"}
      unit: items                    # what the program's counts are in
      settings: {size: 1000}
      matrix: {size: [1000, 4000]}

The argument list is run as it is, never through a shell; ``{setting}`` placeholders
(and ``{outdir}``, ``{spec}``, ``{control}``, ``{seed}``, ``{repetition}``,
``{trial_id}``) are replaced by the trial's values, each argument staying one argument.
The program also finds ``GCBENCH_CONTROL`` (the control channel), ``GCBENCH_SPEC`` (the
trial spec as JSON, settings included) and ``GCBENCH_OUTDIR`` in its environment. Its
standard output and error go to ``program.log`` in the trial folder. The measured window
is the whole process unless the program marks one (:mod:`gcbench.workloads.program`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from gcbench.kinds import ProgramError
from gcbench.spec import TrialSpec
from gcbench.workloads import TrialContext
from gcbench.workloads.program import check_program_placeholders, program_kind, run_program, substitute, values_for

STOP_GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL when the trial stops its program."""


def resolve_cwd(cwd: str | None) -> Path:
    """The program's working folder: ``cwd`` relative to the project root (absolute
    paths as they are); the root when unset."""
    from gcbench import config

    root = config.project_root()
    return (root / cwd).resolve() if cwd else root


def find_executable(argv0: str, cwd: Path, env_path: str | None = None) -> str | None:
    """The path ``argv0`` runs as from ``cwd`` (a name without ``/`` is looked up on
    PATH), or None when there is no such executable file."""
    if "/" in argv0:
        path = Path(argv0) if Path(argv0).is_absolute() else cwd / argv0
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(argv0, path=env_path)


def check_program(program: dict[str, Any], settings: dict[str, Any], runner: str) -> None:
    """Plan-time check: placeholders name settings; the folder and the executable exist.

    Raises:
        ProgramError: naming ``command``, ``cwd`` or ``env.NAME``.
    """
    command = list(program.get("command") or [])
    check_program_placeholders(program, settings)
    if runner != "local":
        return  # it runs in the trial image: what exists here says nothing of it
    cwd = resolve_cwd(program.get("cwd"))
    if not cwd.is_dir():
        raise ProgramError("cwd", f"folder {cwd} does not exist (cwd is relative to the project root)")
    if "{" not in command[0] and find_executable(command[0], cwd) is None:
        where = f"in {cwd}" if "/" in command[0] else "on PATH"
        raise ProgramError("command", f"executable {command[0]!r} not found {where} (or not executable)")


def run(spec: TrialSpec, ctx: TrialContext) -> dict:
    """Run the plan's command as the trial's work; see the module docstring.

    Raises:
        gcbench.errors.TrialError: the executable is missing or the program exited
            with a non-zero status.
    """
    from gcbench.errors import TrialError

    program = spec.program or {}
    outdir = Path(ctx.outdir)
    cwd = resolve_cwd(program.get("cwd"))
    spec_path = outdir / "spec.json"
    if not spec_path.exists():
        spec_path.write_text(spec.to_json(), encoding="utf-8")
    log = open(outdir / "program.log", "ab")

    def start(extra_env: dict[str, str]) -> subprocess.Popen:
        from gcbench.workloads.control import ENV_VAR

        values = values_for(spec, outdir, extra_env[ENV_VAR])
        argv = [substitute(a, values) for a in program["command"]]
        env = {
            **os.environ,
            **{k: substitute(v, values) for k, v in (program.get("env") or {}).items()},
            **extra_env,
            "GCBENCH_SPEC": str(spec_path),
            "GCBENCH_OUTDIR": str(outdir),
            "GCBENCH_TRIAL_ID": spec.trial_id,
        }
        exe = find_executable(argv[0], cwd, env.get("PATH"))
        if exe is None:
            raise TrialError(spec.trial_id, f"command: executable {argv[0]!r} not found (cwd {cwd})")
        ctx.log(f"command {argv!r} in {cwd}")
        return subprocess.Popen([exe, *argv[1:]], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def stop(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    try:
        return run_program(spec, ctx, start, lambda proc: proc.wait(), stop, f"command {program['command'][0]!r}")
    finally:
        log.close()


KIND = program_kind(
    "command",
    "gcbench.workloads.command:run",
    "any program, as an argument list (never a shell), windows and counts through the control channel",
    {"command": True, "env": False, "cwd": False, "unit": False},
    check_program=check_program,
)
"""The kind's registration (entry point ``command`` of group ``gcbench.workloads``)."""
