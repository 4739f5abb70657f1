"""ResNet-50 / CIFAR-10 workload, run for real on CPU with tiny budgets."""

import math

import pynvml
import pytest

from gcbench.spec import Amount
from gcbench.workloads import resnet_cifar

TINY = {
    "dataset": "synthetic",
    "synthetic_train_per_batch": 16,
    "synthetic_test": 32,
    "global_batch": 16,
    "train_samples": 48,
    "lr": 0.01,
}


def test_fixed_budget_training_returns_samples_loss_accuracy(context, make_spec):
    spec = make_spec("resnet_cifar", TINY)
    ctx = context(spec)
    out = resnet_cifar.run(spec, ctx)
    assert ctx.order == ["main", "eval"]
    assert ctx.windows["main"][1] <= ctx.windows["eval"][0]
    assert (out["samples"], out["steps"], out["global_batch"], out["per_gpu_batch"]) == (48, 3, 16, 16)
    assert out["parameters"] == 23_528_522 and out["stem"] == "imagenet"
    assert out["precision_effective"] == "fp32" and out["device_kind"] == "cpu"
    assert math.isfinite(out["loss"]) and out["loss"] > 0
    assert out["test_samples"] == 32
    assert out["accuracy"] * 32 == pytest.approx(round(out["accuracy"] * 32))
    assert "power_cap_w" not in out and out["gpus"] == 1  # the trial's, not the workload's (C12)
    # on a CPU the GPU count asked for is not what ran
    assert out["settings_not_in_effect"] == {"gpus": "no CUDA device: 1 GPU requested, ran in 1 CPU process"}
    assert out["settings_effective"]["gpus"] == 0 and out["settings_effective"]["precision"] == "fp32"


def test_warmup_does_not_change_the_measured_run(context, make_spec):
    settings = {**TINY, "train_samples": 32}
    a = resnet_cifar.run(s := make_spec("resnet_cifar", settings), context(s))
    b = resnet_cifar.run(s := make_spec("resnet_cifar", settings, warmup=Amount(steps=2)), context(s))
    assert a["loss_mean"] == pytest.approx(b["loss_mean"], rel=1e-6)
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)


def test_amp_on_cpu_is_bf16_autocast_and_says_so(context, make_spec):
    spec = make_spec("resnet_cifar", {**TINY, "train_samples": 16, "precision": "amp"})
    out = resnet_cifar.run(spec, context(spec))
    assert out["precision"] == "amp" and out["precision_effective"] == "amp-bf16-cpu"
    assert out["settings_not_in_effect"]["precision"] == (
        "no CUDA device: float16 AMP unavailable, bfloat16 autocast on the CPU instead (amp-bf16-cpu)"
    )
    assert out["settings_effective"]["precision"] == "amp-bf16-cpu"


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"global_batch": 15, "gpus": 2}, "multiple of gpus"),
        ({"train_samples": 8}, "less than one global batch"),
        ({"stem": "vit"}, "imagenet or cifar"),
    ],
)
def test_inconsistent_budgets_are_refused(context, make_spec, settings, message):
    spec = make_spec("resnet_cifar", {**TINY, **settings})
    with pytest.raises(ValueError, match=message):
        resnet_cifar.run(spec, context(spec))


def test_ddp_two_processes_gloo_keep_the_same_budget(context, make_spec):
    spec = make_spec("resnet_cifar", {**TINY, "train_samples": 32, "gpus": 2})
    ctx = context(spec)
    out = resnet_cifar.run(spec, ctx)
    assert out["backend"] == "gloo" and out["world_size"] == 2 and out["gpus"] == 2
    assert out["settings_not_in_effect"] == {
        "gpus": "no CUDA device: 2 GPUs requested, ran in 2 CPU processes (DDP over gloo)"
    }
    assert (out["samples"], out["steps"], out["global_batch"], out["per_gpu_batch"]) == (32, 2, 16, 8)
    assert ctx.order == ["main", "eval"]  # windows opened by rank 0 over the socket
    assert ctx.duration("main") > 0
    assert out["parameters"] == 23_528_522 and math.isfinite(out["loss"])


def test_power_cap_is_the_trials_setting_not_the_workloads(context, make_spec, monkeypatch):
    # the trial process applies power_cap_w around every kind (gcbench.energy.powercap.TrialPowerCap);
    # the workload accepts the setting and never touches NVML
    def no_nvml(*args):
        raise AssertionError("resnet_cifar touched NVML")

    monkeypatch.setattr(pynvml, "nvmlInit", no_nvml)
    spec = make_spec("resnet_cifar", {**TINY, "train_samples": 16, "power_cap_w": 250}, devices=[0])
    out = resnet_cifar.run(spec, context(spec))
    assert out["samples"] == 16 and "power_cap_w" not in out
    assert "power_cap_w" not in out["settings_effective"]


def test_ddp_worker_failure_is_reported_with_its_log(context, make_spec):
    spec = make_spec("resnet_cifar", {**TINY, "train_samples": 16, "gpus": 2, "lr": "fast"})
    ctx = context(spec)
    with pytest.raises(RuntimeError, match="(?s)DDP training failed.*could not convert string to float"):
        resnet_cifar.run(spec, ctx)
    assert "main" not in ctx.windows
