"""The DockerOperator arguments of a trial (the engine itself is exercised by make test-docker)."""

import os
from pathlib import Path

from docker.types import DeviceRequest, Mount

from gcbench.factory.docker import CONTAINER_HOST_SHARE, CONTAINER_OUTDIR, trial_operator_kwargs
from gcbench.plan import expand, plan_from_text

PLAN = """\
name: dock
runner: docker
image: registry.example/gcbench-trial:1.0
devices: [2, 3]
workloads:
  - name: copy
    kind: h2d
    matrix: {memory: [pinned, pageable]}
  - name: shell
    kind: noop
    settings: {note: "pinned; rm -rf / $(reboot) `id` | cat &&"}
  - name: resnet
    kind: resnet_cifar
    settings: {gpus: 2, power_cap_w: 250}
"""


def specs():
    return {s.workload: s for s in expand(plan_from_text(PLAN), repetitions=1)}


def test_trial_container_arguments():
    spec = specs()["copy"]
    kw = trial_operator_kwargs(
        spec, "registry.example/gcbench-trial:1.0", Path("/data/runs/x"), home=Path("/data/home")
    )
    assert kw["image"] == "registry.example/gcbench-trial:1.0"
    assert kw["command"] == ["python", "-m", "gcbench.trial", f"{CONTAINER_OUTDIR}/spec.json", CONTAINER_OUTDIR]
    assert kw["auto_remove"] == "force" and kw["mount_tmp_dir"] is False and kw["network_mode"] == "none"
    out, cache, share = kw["mounts"]
    assert isinstance(out, Mount)
    assert out["Source"] == "/data/runs/x" and out["Target"] == CONTAINER_OUTDIR and out["Type"] == "bind"
    assert out["ReadOnly"] is False
    assert cache["Source"] == "/data/home/cache" and cache["ReadOnly"] is False
    # the host's register of running trials (C13): the container's own /tmp would hide its neighbours
    assert share["Source"] == os.environ["GCBENCH_HOST_SHARE_DIR"] and share["Target"] == CONTAINER_HOST_SHARE
    assert share["ReadOnly"] is False and kw["environment"]["GCBENCH_HOST_SHARE_DIR"] == CONTAINER_HOST_SHARE
    # every GPU is visible, CUDA_VISIBLE_DEVICES selects the trial's in PCI order (NVML keeps host indices)
    (req,) = kw["device_requests"]
    assert isinstance(req, DeviceRequest) and req.count == -1 and req.capabilities == [["gpu"]]
    assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "2"
    assert kw["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # the container writes the trial folder as the calling user, so collect can read it
    assert kw["user"] == f"{os.getuid()}:{os.getgid()}"
    assert "cap_add" not in kw


def test_external_tokenizer_trial_mounts_binaries_and_sources_read_only():
    plan = plan_from_text(
        PLAN.replace(
            "  - name: copy", "  - name: lm\n    kind: tinylm\n    settings: {path: external-go}\n  - name: copy"
        )
    )
    spec = next(s for s in expand(plan, repetitions=1) if s.workload == "lm")
    kw = trial_operator_kwargs(spec, "img", Path("/o"), home=Path("/h"), native_dir=Path("/src/native"))
    by_target = {m["Target"]: m for m in kw["mounts"]}
    assert by_target["/gcbench/home/tools"]["Source"] == "/h/tools" and by_target["/gcbench/home/tools"]["ReadOnly"]
    assert by_target["/gcbench/project/native"]["Source"] == "/src/native"
    assert by_target["/gcbench/project/native"]["ReadOnly"]
    assert kw["environment"]["GCBENCH_HOME"] == "/gcbench/home"


def test_multi_gpu_power_capped_trial_gets_both_gpus_and_sys_admin():
    spec = specs()["resnet"]
    kw = trial_operator_kwargs(spec, "img", Path("/o"), home=Path("/h"))
    assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert kw["cap_add"] == ["SYS_ADMIN"]
    assert kw["user"] == "0:0"  # a non-root process keeps no capability


def test_engine_address_comes_from_docker_host(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/gcbench/docker.sock")
    kw = trial_operator_kwargs(specs()["copy"], "img", Path("/o"), home=Path("/h"))
    assert kw["docker_url"] == "unix:///run/gcbench/docker.sock"


def test_plan_values_never_reach_a_shell():
    spec = next(s for s in expand(plan_from_text(PLAN)) if "rm -rf" in str(s.settings.get("note")))
    kw = trial_operator_kwargs(spec, "img", Path("/o"), home=Path("/h"))
    # The command is an argv list naming the spec file; the factor value stays inside spec.json.
    assert isinstance(kw["command"], list) and not any("rm -rf" in part for part in kw["command"])


def test_operator_accepts_the_arguments():
    from airflow.providers.docker.operators.docker import DockerOperator

    spec = specs()["copy"]
    op = DockerOperator(task_id="t", **trial_operator_kwargs(spec, "img", Path("/o"), home=Path("/h")))
    assert op.auto_remove == "force" and op.mount_tmp_dir is False
    assert op.device_requests[0].count == -1


def test_host_data_dir_is_mounted_read_only(monkeypatch, tmp_path):
    monkeypatch.setenv("GCBENCH_DATA_DIR", str(tmp_path))
    kw = trial_operator_kwargs(specs()["resnet"], "img", Path("/o"))
    (data,) = [m for m in kw["mounts"] if m["Target"] == "/data"]
    assert (data["Source"], data["Target"], data["ReadOnly"]) == (str(tmp_path), "/data", True)
    assert kw["environment"]["GCBENCH_DATA_DIR"] == "/data"


def test_both_runners_tell_the_trial_the_hosts_gpus_for_its_cpu_slice(monkeypatch):
    from gcbench.factory.local import trial_env

    spec = specs()["copy"]
    kw = trial_operator_kwargs(spec, "img", Path("/o"), home=Path("/h"), host_devices=[3, 2])
    assert kw["environment"]["GCBENCH_HOST_DEVICES"] == "2,3"
    assert trial_env(spec, base={}, host_devices=[3, 2])["GCBENCH_HOST_DEVICES"] == "2,3"
    # a value of the runner's own environment is never passed on as the plan's
    monkeypatch.setenv("GCBENCH_HOST_DEVICES", "0,1,2,3,4,5,6,7")
    assert "GCBENCH_HOST_DEVICES" not in trial_env(spec)
    assert "GCBENCH_HOST_DEVICES" not in trial_operator_kwargs(spec, "img", Path("/o"), home=Path("/h"))["environment"]


def test_without_a_share_dir_set_the_register_is_mounted_from_the_home_on_the_docker_host(monkeypatch):
    """In docker-compose.yml the worker's /tmp is not a folder of the host, and the engine
    refuses a bind mount whose source does not exist: the register lives under
    GCBENCH_HOME, a path the host and the worker container share."""
    monkeypatch.delenv("GCBENCH_HOST_SHARE_DIR", raising=False)
    kw = trial_operator_kwargs(specs()["copy"], "img:1", Path("/data/runs/x"), home=Path("/data/home"))
    share = next(m for m in kw["mounts"] if m["Target"] == CONTAINER_HOST_SHARE)
    assert share["Source"] == "/data/home/host-share" and share["Type"] == "bind"
