"""The DockerOperator arguments of a trial (the engine itself is exercised by make test-docker)."""

from pathlib import Path

from docker.types import DeviceRequest, Mount

from gcbench.factory.docker import CONTAINER_OUTDIR, trial_operator_kwargs
from gcbench.plan import expand, plan_from_text

PLAN = """\
name: dock
runner: docker
image: registry.example/gcbench-trial:1.0
devices: [2, 3]
workloads:
  - name: copy
    kind: h2d
    matrix: {memory: ["pinned; rm -rf /", pageable]}
  - name: resnet
    kind: resnet_cifar
    settings: {gpus: 2, power_cap_w: 250}
"""


def specs():
    return {s.workload: s for s in expand(plan_from_text(PLAN), repetitions=1)}


def test_trial_container_arguments():
    spec = specs()["copy"]
    kw = trial_operator_kwargs(spec, "registry.example/gcbench-trial:1.0", Path("/data/runs/x"))
    assert kw["image"] == "registry.example/gcbench-trial:1.0"
    assert kw["command"] == ["python", "-m", "gcbench.trial", f"{CONTAINER_OUTDIR}/spec.json", CONTAINER_OUTDIR]
    assert kw["auto_remove"] == "force" and kw["mount_tmp_dir"] is False and kw["network_mode"] == "none"
    (mount,) = kw["mounts"]
    assert isinstance(mount, Mount)
    assert mount["Source"] == "/data/runs/x" and mount["Target"] == CONTAINER_OUTDIR and mount["Type"] == "bind"
    assert mount["ReadOnly"] is False
    (req,) = kw["device_requests"]
    assert isinstance(req, DeviceRequest) and req.device_ids == ["2"] and req.capabilities == [["gpu"]]
    assert "cap_add" not in kw


def test_multi_gpu_power_capped_trial_gets_both_gpus_and_sys_admin():
    spec = specs()["resnet"]
    kw = trial_operator_kwargs(spec, "img", Path("/o"))
    assert kw["device_requests"][0].device_ids == ["2", "3"]
    assert kw["cap_add"] == ["SYS_ADMIN"]


def test_plan_values_never_reach_a_shell():
    spec = next(s for s in expand(plan_from_text(PLAN)) if "rm -rf" in str(s.factors.get("memory")))
    kw = trial_operator_kwargs(spec, "img", Path("/o"))
    # The command is an argv list naming the spec file; the factor value stays inside spec.json.
    assert isinstance(kw["command"], list) and not any("rm -rf" in part for part in kw["command"])


def test_operator_accepts_the_arguments():
    from airflow.providers.docker.operators.docker import DockerOperator

    spec = specs()["copy"]
    op = DockerOperator(task_id="t", **trial_operator_kwargs(spec, "img", Path("/o")))
    assert op.auto_remove == "force" and op.mount_tmp_dir is False
    assert op.device_requests[0].device_ids == ["2"]
