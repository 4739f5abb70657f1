"""gcbench.factory.tokenizers: cached local builds, compiler failures, docker build kwargs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gcbench.factory import tokenizers as tk
from gcbench.tokenizer.errors import TokenizerBuildError

REPO = Path(__file__).resolve().parents[2]


def copy_native(tmp_path: Path, impl: str) -> Path:
    """A private copy of native/<impl> (sources only), to break or change it."""
    native = tmp_path / "native"
    src = REPO / "native" / impl
    ignore = shutil.ignore_patterns("target", "gcbench-tok-*")
    shutil.copytree(src, native / impl, ignore=ignore)
    return native


def test_source_hash_ignores_tests_and_changes_with_any_source_byte(tmp_path):
    native = copy_native(tmp_path, "go")
    tok = tk.tokenizer("go", native)
    before = tok.source_hash()
    assert [p.name for p in tok.source_files()] == ["bpe.go", "go.mod", "main.go", "tokfile.go"]
    (native / "go" / "bpe_test.go").write_text("package main\n")
    assert tok.source_hash() == before
    main = native / "go" / "main.go"
    main.write_text(main.read_text() + "\n// changed\n")
    assert tok.source_hash() != before
    assert tok.cached_binary(tmp_path).name == f"gcbench-tok-go-{tok.source_hash()[:16]}"


def test_rust_source_hash_covers_manifest_lock_and_sources(tmp_path):
    native = copy_native(tmp_path, "rust")
    files = [p.relative_to(native / "rust").as_posix() for p in tk.tokenizer("rust", native).source_files()]
    assert files == ["Cargo.lock", "Cargo.toml", "src/lib.rs", "src/main.rs", "src/sha256.rs", "src/tokfile.rs"]


def test_local_build_argv_is_a_list_without_a_shell():
    assert tk.local_build_argv("go", Path("/c/x")) == ["go", "build", "-trimpath", "-o", "/c/x", "."]
    assert tk.local_build_argv("rust", Path("/c/x")) == ["cargo", "build", "--release", "--locked", "--offline"]
    with pytest.raises(ValueError, match="unknown tokenizer implementation 'zig'"):
        tk.tokenizer("zig")


@pytest.mark.skipif(shutil.which("go") is None, reason="go not installed (make system-deps)")
def test_unchanged_go_source_is_built_once_then_served_from_the_cache(tmp_path, monkeypatch):
    cache = tmp_path / "tools"
    binary = tk.build_local("go", cache)
    assert binary.name.startswith("gcbench-tok-go-") and os.access(binary, os.X_OK)
    info = json.loads(binary.with_name(binary.name + ".json").read_text())
    assert info["source_hash"].startswith(binary.name.rsplit("-", 1)[1]) and info["builder"] == "local"
    assert "go1." in info["toolchain"]

    def no_compiler(*args, **kwargs):
        raise AssertionError("rebuilt an unchanged source")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    assert tk.build_local("go", cache) == binary


@pytest.mark.skipif(shutil.which("go") is None, reason="go not installed (make system-deps)")
def test_failed_go_build_raises_with_the_compiler_message(tmp_path):
    native = copy_native(tmp_path, "go")
    main = native / "go" / "main.go"
    main.write_text(main.read_text().replace("func main() {", "func main() {\n\tundefinedThing()"))
    with pytest.raises(TokenizerBuildError) as info:
        tk.build_local("go", tmp_path / "tools", native_dir=native)
    assert re.search(r"go build -trimpath failed \(exit status \d\):", str(info.value))
    assert "undefined: undefinedThing" in str(info.value)
    assert info.value.exit_code == 8 and info.value.impl == "go"
    assert not list((tmp_path / "tools").glob("gcbench-tok-go-*"))


@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo not installed")
def test_failed_rust_build_raises_with_the_compiler_message(tmp_path):
    native = copy_native(tmp_path, "rust")
    lib = native / "rust" / "src" / "lib.rs"
    lib.write_text(lib.read_text() + "\nfn broken() -> u32 { \"text\" }\n")
    with pytest.raises(TokenizerBuildError) as info:
        tk.build_local("rust", tmp_path / "tools", native_dir=native)
    assert "cargo build --release failed (exit status 101)" in str(info.value)
    assert "mismatched types" in info.value.output


def test_missing_toolchain_names_the_package_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(tk.shutil, "which", lambda name: None)
    with pytest.raises(TokenizerBuildError, match=r"'go' is not on PATH; install it \(apt-get install golang-go\)"):
        tk.build_local("go", tmp_path / "empty-cache")


def test_missing_sources_say_where_they_were_looked_for(tmp_path):
    with pytest.raises(TokenizerBuildError, match="no rust sources here; set GCBENCH_PROJECT_ROOT"):
        tk.build_local("rust", tmp_path, native_dir=tmp_path / "native")


@pytest.mark.parametrize("impl", ["go", "rust"])
def test_docker_build_kwargs_mount_sources_read_only_and_run_the_compiler_offline(impl, tmp_path):
    kwargs = tk.docker_build_kwargs(impl, tmp_path, docker_url="unix://docker.sock")
    src, out = kwargs["mounts"]
    assert (src["Target"], src["Source"], src["ReadOnly"]) == ("/src", str(REPO / "native" / impl), True)
    assert (out["Target"], out["Source"], out["ReadOnly"]) == ("/out", str(tmp_path.resolve()), False)
    assert kwargs["image"] == f"gcbench/tokenizer-{impl}-toolchain:1"
    assert kwargs["network_mode"] == "none" and kwargs["auto_remove"] == "force"
    assert kwargs["user"] == f"{os.getuid()}:{os.getgid()}"
    assert kwargs["working_dir"] == "/src" and kwargs["docker_url"] == "unix://docker.sock"
    h = tk.tokenizer(impl).source_hash()[:16]
    if impl == "go":
        assert kwargs["command"] == ["go", "build", "-trimpath", "-o", f"/out/.docker-build-{h}/gcbench-tok-go", "."]
        assert kwargs["environment"]["CGO_ENABLED"] == "0"
    else:
        assert kwargs["command"] == ["cargo", "build", "--release", "--locked", "--offline"]
        assert kwargs["environment"]["CARGO_TARGET_DIR"] == f"/out/.docker-build-{h}/cargo-target"
    host_side = tk.docker_build_output(impl, tmp_path, tk.tokenizer(impl).source_hash())
    assert str(host_side).startswith(str(tmp_path / f".docker-build-{h}"))


def test_toolchain_image_build_argv_targets_the_toolchain_stage_with_a_local_base():
    argv = tk.toolchain_image_build_argv("rust", base_image="gcbench/debian:bookworm")
    assert argv == [
        "docker", "build", "--network", "host", "--target", "toolchain", "-t", "gcbench/tokenizer-rust-toolchain:1",
        "-f", str(REPO / "images" / "tokenizer-rust.Dockerfile"), "--build-arg", "BASE_IMAGE=gcbench/debian:bookworm",
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
