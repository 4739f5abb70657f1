"""Kinds python and command: a user's work measured with the rules of the built-ins."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from gcbench.errors import PlanError
from gcbench.plan.check import check_plan
from gcbench.plan.loader import load_plan
from gcbench.plan.schema import ValidationSettings
from gcbench.plan.trials import expand
from gcbench.spec import Amount, EnergySettings, TrialSpec
from gcbench.trial import run_trial
from gcbench.validate import named_window_findings

REPO = Path(__file__).resolve().parents[2]
MARKS = REPO / "tests" / "fixtures" / "programs" / "marks.py"
SIM = EnergySettings(backend="simulated", sample_hz=20)
BUSY_W = 300.0  # the simulated device's power while a window is open


def _spec(kind: str, program: dict, settings: dict | None = None, **kw) -> TrialSpec:
    return TrialSpec(
        plan="p",
        workload="w",
        kind=kind,
        variant="w",
        settings=settings or {},
        repetition=0,
        seed=1,
        devices=[0],
        energy=SIM,
        program=program,
        **kw,
    ).with_id()


def _run(spec: TrialSpec, outdir: Path, monkeypatch) -> dict:
    monkeypatch.setenv("GCBENCH_SDK_PATH", str(REPO / "plugins"))
    monkeypatch.setenv("GCBENCH_PROJECT_ROOT", str(REPO))
    code = run_trial(spec, outdir)
    result = json.loads((outdir / "result.json").read_text())
    result["_code"] = code
    return result


def _command(mode: str, seconds: float = 1.2, unit: str = "tokens") -> TrialSpec:
    return _spec(
        "command", {"command": [sys.executable, str(MARKS), "{seconds}", mode], "unit": unit}, {"seconds": seconds}
    )


def test_a_window_marked_by_a_child_program_gets_the_energy_of_the_same_work_in_a_built_in_window(
    tmp_path, monkeypatch
):
    r = _run(_command("marked"), tmp_path / "cmd", monkeypatch)
    assert r["_code"] == 0, r["error"]
    m = r["metrics"]
    # the program's own window (1.2 s), not the process (1.8 s with its sleeps before and after)
    assert m["duration_s"] == pytest.approx(1.2, abs=0.08)
    assert m["gpu_energy_j"] / m["duration_s"] == pytest.approx(BUSY_W, rel=0.01)
    # the same span of work in a built-in window (noop, a window in seconds)
    noop = TrialSpec(
        plan="p",
        workload="n",
        kind="noop",
        variant="n",
        repetition=0,
        seed=1,
        devices=[0],
        energy=SIM,
        window=Amount(seconds=1.2),
    ).with_id()
    b = _run(noop, tmp_path / "noop", monkeypatch)["metrics"]
    assert m["gpu_energy_j"] / m["duration_s"] == pytest.approx(b["gpu_energy_j"] / b["duration_s"], rel=0.01)
    # counts make the figures
    assert m["tokens"] > 0
    assert m["j_per_token"] == pytest.approx(m["gpu_energy_j"] / m["tokens"])
    assert m["tokens_per_s"] == pytest.approx(m["tokens"] / m["duration_s"])
    assert r["control"]["problems"] == [] and r["control"]["whole_program_window"] is False
    assert r["stability"]["main"]["steps"] > 20


def test_an_unmarked_program_is_measured_as_a_whole(tmp_path, monkeypatch):
    r = _run(_command("unmarked", 1.0), tmp_path, monkeypatch)
    assert r["_code"] == 0, r["error"]
    assert r["control"]["whole_program_window"] is True
    assert r["metrics"]["duration_s"] >= 1.0 and r["metrics"]["tokens"] > 0  # counts belong to main


def test_named_windows_get_their_own_figures(tmp_path, monkeypatch):
    r = _run(_command("named", 1.1), tmp_path, monkeypatch)
    assert r["_code"] == 0, r["error"]
    m = r["metrics"]
    for w in ("prefill", "decode"):
        assert m[f"{w}_duration_s"] == pytest.approx(1.1, abs=0.08)
        assert m[f"{w}_j_per_token"] == pytest.approx(m[f"{w}_gpu_energy_j"] / m[f"{w}_tokens"])
    assert m["prefill_tokens"] > 50 * m["decode_tokens"]  # 1000 per step against 10
    assert m["decode_j_per_token"] > 50 * m["prefill_j_per_token"]


def test_a_window_never_ended_invalidates_the_trial_and_keeps_its_samples(tmp_path, monkeypatch):
    r = _run(_command("unended", 1.0), tmp_path, monkeypatch)
    assert r["_code"] == 0
    assert r["control"]["windows_never_ended"] == ["main"]
    reasons, flags = [], []
    named_window_findings(r, ValidationSettings(), 1.0, 0.1, reasons, flags)
    assert reasons == ["window main was never ended by the program: closed at its exit, so its end is not measured"]
    assert (tmp_path / "samples.csv").stat().st_size > 0


def test_a_count_outside_any_window_is_a_reason_on_the_trial_not_a_crash(tmp_path, monkeypatch):
    r = _run(_command("outside", 1.0), tmp_path, monkeypatch)
    assert r["_code"] == 0
    assert any("outside any window" in p for p in r["control"]["problems"])
    reasons, flags = [], []
    named_window_findings(r, ValidationSettings(), 1.0, 0.1, reasons, flags)
    assert reasons == [] and any(f.startswith("control channel: ") and "outside any window" in f for f in flags)


def test_a_failing_program_fails_the_trial_with_its_log_tail(tmp_path, monkeypatch):
    r = _run(_command("fail"), tmp_path, monkeypatch)
    assert r["_code"] == 1 and r["status"] == "failed"
    assert "exited with status 3" in r["error"] and "something went wrong" in r["error"]


def test_energy_without_a_count_says_why_there_is_no_j_per_unit(tmp_path, monkeypatch):
    spec = _spec("command", {"command": [sys.executable, "-c", "import time; time.sleep(1.1)"], "unit": "requests"})
    r = _run(spec, tmp_path, monkeypatch)
    assert r["_code"] == 0
    assert r["metrics"]["gpu_energy_j"] > 0 and "gpu_j_per_unit" not in r["metrics"]
    assert (
        r["no_unit_reason"]
        == "no count of requests in the main window (count requests N on the control channel): no J/requests"
    )


def test_a_python_function_runs_with_the_built_in_protocol(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    spec = _spec(
        "python",
        {"entrypoint": "tests.fixtures.programs.user_fn:run", "unit": "requests"},
        {"seconds": 1.1, "note": "a; rm -rf / $(x)"},
    )
    r = _run(spec, tmp_path, monkeypatch)
    assert r["_code"] == 0, r["error"]
    m = r["metrics"]
    assert m["unit"] == "requests" and m["units"] == m["requests"] > 0
    assert m["gpu_j_per_unit"] == pytest.approx(m["gpu_energy_j"] / m["units"])
    assert m["units_per_s"] == pytest.approx(m["units"] / m["duration_s"])
    assert m["quality"] == 0.9 and m["note"] == "a; rm -rf / $(x)"  # settings passed as written


PLAN_HEAD = """\
name: user-plan
runner: {runner}
workloads:
"""


def _plan(tmp_path: Path, body: str, runner: str = "local") -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN_HEAD.format(runner=runner) + textwrap.dedent(body))
    return path


@pytest.mark.parametrize(
    "body, runner, line, field, message",
    [
        (
            "  - name: a\n    kind: commnad\n    command: [ls]\n",
            "local",
            5,
            "workloads[0].kind",
            "unknown workload kind 'commnad'; installed kinds: ",
        ),
        (
            "  - name: a\n    kind: python\n    entrypoint: 'no_such_pkg.mod:run'\n",
            "local",
            6,
            "workloads[0].entrypoint",
            "cannot find module 'no_such_pkg.mod'",
        ),
        (
            "  - name: a\n    kind: python\n    entrypoint: 'tests.fixtures.programs.user_fn:runn'\n",
            "local",
            6,
            "workloads[0].entrypoint",
            "defines no 'runn'",
        ),
        (
            "  - name: a\n    kind: command\n    command: [./no-such-program, x]\n",
            "local",
            6,
            "workloads[0].command",
            "executable './no-such-program' not found",
        ),
        (
            "  - name: a\n    kind: command\n    command: [ls, '{sise}']\n    settings: {size: 1}\n",
            "local",
            6,
            "workloads[0].command",
            "{sise} is not a setting of this workload",
        ),
        (
            "  - name: a\n    kind: command\n    command: [ls]\n    env: {X: '{nope}'}\n",
            "local",
            7,
            "workloads[0].env.X",
            "{nope} is not a setting",
        ),
        (
            "  - name: a\n    kind: container\n    image: me/img:1\n",
            "local",
            6,
            "workloads[0].image",
            "set runner: docker",
        ),
        (
            "  - name: a\n    kind: tinylm\n    command: [ls]\n",
            "local",
            4,
            "workloads[0]",
            "'command' is not a field of kind 'tinylm'",
        ),
        ("  - name: a\n    kind: command\n", "local", 4, "workloads[0]", "kind 'command' needs 'command'"),
        (
            "  - name: a\n    kind: tinylm\n    settings: {model: gpt2}\n",
            "local",
            6,
            "workloads[0].settings.model",
            "unknown tinylm setting",
        ),
    ],
)
def test_plan_errors_name_the_file_line_and_field(tmp_path, monkeypatch, body, runner, line, field, message):
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.setenv("GCBENCH_PROJECT_ROOT", str(REPO))
    path = _plan(tmp_path, body, runner)
    with pytest.raises(PlanError) as err:
        plan = load_plan(path)
        check_plan(plan, source=str(path))
    text = str(err.value)
    assert f"{path}:{line}" in text, text
    assert field in text and message in text, text


def test_a_user_program_plan_expands_with_its_program_in_the_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("GCBENCH_PROJECT_ROOT", str(REPO))
    path = _plan(
        tmp_path, "  - name: a\n    kind: command\n    command: [ls, '{n}']\n    unit: files\n    matrix: {n: [1, 2]}\n"
    )
    specs = expand(load_plan(path))
    assert {s.variant for s in specs} == {"a[n=1]", "a[n=2]"}
    assert all(s.program == {"command": ["ls", "{n}"], "unit": "files"} and s.unit == "files" for s in specs)


def test_built_in_specs_keep_their_trial_ids():
    """The spec's program field is left out of the hashed JSON when unset."""
    spec = TrialSpec(plan="smoke", workload="noop", kind="noop", variant="noop", repetition=0, seed=1)
    assert "program" not in spec.canonical_json()
