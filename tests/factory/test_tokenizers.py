"""gcbench.factory.tokenizers: the docker build's kwargs, toolchain image and Dockerfiles
(the local build is tests/tokenizer/test_build.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gcbench.factory import tokenizers as tk
from gcbench.tokenizer.preprocessors import builtin

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("impl", ["go", "rust"])
def test_docker_build_kwargs_mount_sources_read_only_and_run_the_compiler_offline(impl, tmp_path):
    kwargs = tk.docker_build_kwargs(builtin()[impl], tmp_path, docker_url="unix://docker.sock")
    src, out = kwargs["mounts"]
    assert (src["Target"], src["Source"], src["ReadOnly"]) == ("/src", str(REPO / "native" / impl), True)
    assert (out["Target"], out["Source"], out["ReadOnly"]) == ("/out", str(tmp_path.resolve()), False)
    assert kwargs["image"] == f"gcbench/tokenizer-{impl}-toolchain:1"
    assert kwargs["network_mode"] == "none" and kwargs["auto_remove"] == "force"
    assert kwargs["user"] == f"{os.getuid()}:{os.getgid()}"
    assert kwargs["working_dir"] == "/src" and kwargs["docker_url"] == "unix://docker.sock"
    h = builtin()[impl].source_hash()[:16]
    if impl == "go":
        assert kwargs["command"] == ["go", "build", "-trimpath", "-o", f"/out/.docker-build-{h}/gcbench-tok-go", "."]
        assert kwargs["environment"]["CGO_ENABLED"] == "0"
    else:
        assert kwargs["command"] == ["cargo", "build", "--release", "--locked", "--offline"]
        assert kwargs["environment"]["CARGO_TARGET_DIR"] == "/out/work-rust/target"
    host_side = tk.docker_build_output(builtin()[impl], tmp_path, builtin()[impl].source_hash())
    if impl == "go":
        assert host_side == tmp_path / f".docker-build-{h}" / "gcbench-tok-go"
    else:
        assert host_side == tmp_path / "work-rust" / "target" / "release" / "gcbench-tok-rust"


def test_toolchain_image_build_argv_targets_the_toolchain_stage_with_a_local_base():
    argv = tk.toolchain_image_build_argv(builtin()["rust"], base_image="gcbench/debian:bookworm")
    assert argv == [
        "docker",
        "build",
        "--network",
        "host",
        "--target",
        "toolchain",
        "-t",
        "gcbench/tokenizer-rust-toolchain:1",
        "-f",
        str(REPO / "images" / "tokenizer-rust.Dockerfile"),
        "--build-arg",
        "BASE_IMAGE=gcbench/debian:bookworm",
        str(REPO / "native"),
    ]


@pytest.mark.parametrize("impl", ["go", "rust"])
def test_dockerfiles_take_the_base_image_as_a_build_arg_and_have_the_three_stages(impl):
    text = (REPO / "images" / f"tokenizer-{impl}.Dockerfile").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE=")
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms == [
        "FROM ${BASE_IMAGE} AS toolchain",
        "FROM toolchain AS build",
        "FROM ${RUNTIME_IMAGE} AS runtime",
    ]
    assert f'ENTRYPOINT ["/usr/local/bin/gcbench-tok-{impl}"]' in lines


def test_toolchain_image_build_kwargs_are_the_cli_build_through_the_engines_api(tmp_path):
    """The build task makes a missing toolchain image with the Docker SDK (the Airflow
    images have no ``docker`` command): the same context, Dockerfile, stage, tag, base
    image and host network as the ``docker build`` argv."""
    rust = builtin()["rust"]
    kwargs = tk.toolchain_image_build_kwargs(rust, base_image="gcbench/debian:bookworm")
    assert kwargs == {
        "path": str(REPO / "native"),
        "dockerfile": str(REPO / "images" / "tokenizer-rust.Dockerfile"),
        "tag": "gcbench/tokenizer-rust-toolchain:1",
        "target": "toolchain",
        "buildargs": {"BASE_IMAGE": "gcbench/debian:bookworm"},
        "network_mode": "host",
        "rm": True,
        "decode": True,
    }
    from gcbench.plan.loader import load_plan

    plan = load_plan(REPO / "examples" / "tokenizer-c" / "plan.yaml")
    c = plan.declared_preprocessors()["c"]
    kwargs = tk.toolchain_image_build_kwargs(c)
    assert (kwargs["path"], kwargs["dockerfile"], kwargs["tag"]) == (
        str(REPO / "examples" / "tokenizer-c"),
        str(REPO / "examples" / "tokenizer-c" / "Dockerfile"),
        "gcbench/preprocessor-c-toolchain:1",
    )
    assert "target" not in kwargs and "buildargs" not in kwargs  # the Dockerfile's own default base


def test_a_container_build_writes_into_folders_made_beforehand_one_stage_per_build(tmp_path):
    """``cc -o /out/<stage>/gcbench-tok-c`` does not create ``<stage>`` (the compose test's
    first C build failed with "ld: cannot open output file"), and two backfilled nights
    building the same version at once must not share (and remove) one stage folder."""
    from gcbench.plan.loader import load_plan

    c = load_plan(REPO / "examples" / "tokenizer-c" / "plan.yaml").declared_preprocessors()["c"]
    cache = tmp_path / "tools"
    h = c.source_hash()
    one = tk.prepare_docker_build(c, cache, h)
    other = tk.prepare_docker_build(c, cache, h)
    assert one != other and one.startswith(f".docker-build-{h[:16]}-") and other.startswith(f".docker-build-{h[:16]}-")
    assert (cache / one).is_dir() and (cache / other).is_dir() and (cache / "work-c").is_dir()
    kwargs = tk.docker_build_kwargs(c, cache, stage=one, docker_url="unix://docker.sock")
    assert kwargs["command"] == ["cc", "-O2", "-std=c99", "-o", f"/out/{one}/gcbench-tok-c", "tok.c"]
    assert tk.docker_build_output(c, cache, h, one) == cache / one / "gcbench-tok-c"
