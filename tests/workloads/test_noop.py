from gcbench.spec import Amount
from gcbench.workloads import noop


def test_steps_window_runs_exactly_n_trivial_steps(context, make_spec):
    spec = make_spec("noop", window=Amount(steps=1000), warmup=Amount(steps=5))
    ctx = context(spec)
    out = noop.run(spec, ctx)
    assert out == {
        "steps": 1000,
        "window_mode": "steps",
        "device_kind": "cpu",
        "settings_effective": {"tick_s": 0.01, "note": "", "kill_self_after_s": None, "jitter_s_sd": 0.0},
        "settings_not_in_effect": {},
    }
    assert ctx.order == ["main"]
    assert ctx.duration() < 0.05  # trivial steps, no sleeping


def test_planted_noise_lengthens_a_seconds_window_by_a_seeded_amount(context, make_spec):
    import random

    spec = make_spec("noop", {"jitter_s_sd": 0.1}, window=Amount(seconds=0.1))
    extra_s = abs(random.Random(spec.seed).gauss(0.0, 0.1))
    ctx = context(spec)
    noop.run(spec, ctx)
    assert 0.1 + extra_s - 0.005 <= ctx.duration() < 0.1 + extra_s + 0.5


def test_seconds_window_sleeps_for_the_window(context, make_spec):
    spec = make_spec("noop", {"tick_s": 0.02}, window=Amount(seconds=0.2))
    ctx = context(spec)
    out = noop.run(spec, ctx)
    assert out["window_mode"] == "seconds"
    assert 0.2 <= ctx.duration() < 1.0
    # whole 20-ms sleeps until 0.2 s have passed: at most 11, fewer when a loaded machine oversleeps
    assert 2 <= out["steps"] <= 11 and out["steps"] * 0.02 <= ctx.duration() + 0.02


def test_noop_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys; from gcbench.workloads import noop; "
        "from gcbench.spec import TrialSpec; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unknown_setting_is_refused(context, make_spec):
    import pytest

    spec = make_spec("noop", {"tick": 1})
    with pytest.raises(ValueError, match="unknown noop settings: tick"):
        noop.run(spec, context(spec))
