"""gcbench.tokenizer.build: source hashes, cached local builds, compiler failures."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gcbench.tokenizer import build as tk
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
    lib.write_text(lib.read_text() + '\nfn broken() -> u32 { "text" }\n')
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
