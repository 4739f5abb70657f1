"""gcbench.tokenizer.preprocessors: declarations, source hashes, cached local builds,
compiler failures, the output contract and the conformance check."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gcbench.tokenizer import preprocessors as tk
from gcbench.tokenizer.errors import TokenizerBuildError, TokenizerError

REPO = Path(__file__).resolve().parents[2]


def copy_native(tmp_path: Path, impl: str) -> Path:
    """A private copy of native/<impl> (sources only) and the built-in declarations, to break or change it."""
    native = tmp_path / "native"
    src = REPO / "native" / impl
    ignore = shutil.ignore_patterns("target", "gcbench-tok-*")
    shutil.copytree(src, native / impl, ignore=ignore)
    shutil.copy(REPO / "native" / "preprocessors.yaml", native / "preprocessors.yaml")
    return native


def shipped(impl: str, native: Path | None = None) -> tk.Preprocessor:
    return tk.builtin(native)[impl]


def test_source_hash_ignores_tests_and_changes_with_any_source_byte(tmp_path):
    native = copy_native(tmp_path, "go")
    tok = shipped("go", native)
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
    files = [p.relative_to(native / "rust").as_posix() for p in shipped("rust", native).source_files()]
    assert files == ["Cargo.lock", "Cargo.toml", "src/lib.rs", "src/main.rs", "src/sha256.rs", "src/tokfile.rs"]


def test_the_built_ins_are_declarations_of_the_plan_form():
    decls = tk.builtin()
    assert sorted(decls) == ["go", "rust"]
    assert decls["go"].decl.build.command == ["go", "build", "-trimpath", "-o", "{out}", "."]
    assert decls["rust"].decl.build.command == ["cargo", "build", "--release", "--locked", "--offline"]
    assert decls["rust"].decl.build.artifact == "{work}/target/release/gcbench-tok-rust"
    assert all(d.builtin and d.decl.output == "gcbtoken" for d in decls.values())
    assert decls["go"].source_dir == REPO / "native" / "go"


def test_declarations_refuse_unknown_placeholders_and_a_run_without_its_files():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"unknown placeholder \{src\} in '\{src\}/x'"):
        tk.PreprocessorDecl(source="x", build={"command": ["cc", "{src}/x"]})
    with pytest.raises(ValidationError, match=r"run must use \{out\}"):
        tk.PreprocessorDecl(source="x", build={"command": ["cc"]}, run=["{binary}", "{in}"])
    with pytest.raises(ValueError, match="'go' is already declared by GC-Bench"):
        tk.declared({"go": tk.PreprocessorDecl(source="x", build={"command": ["cc"]})})


@pytest.mark.skipif(shutil.which("go") is None, reason="go not installed (make system-deps)")
def test_unchanged_go_source_is_built_once_then_served_from_the_cache(tmp_path, monkeypatch):
    cache = tmp_path / "tools"
    binary = tk.build_local(shipped("go"), cache)
    assert binary.name.startswith("gcbench-tok-go-") and os.access(binary, os.X_OK)
    info = json.loads(binary.with_name(binary.name + ".json").read_text())
    assert info["source_sha256"].startswith(binary.name.rsplit("-", 1)[1]) and info["builder"] == "local"
    assert "go1." in info["toolchain"] and info["binary_sha256"] == tk.sha256_of(binary)
    assert info["conformance"]["passed"] is True and info["conformance"]["inputs"] == len(tk.conformance_inputs())

    def no_compiler(*args, **kwargs):
        raise AssertionError("rebuilt an unchanged source")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    assert tk.build_local(shipped("go"), cache) == binary


@pytest.mark.skipif(shutil.which("go") is None, reason="go not installed (make system-deps)")
def test_a_relative_cache_folder_is_built_into_and_its_binary_runs(tmp_path, monkeypatch):
    """The build runs in the source folder: a relative cache (make gpu-studies gave
    ``.gcbench/gpu-studies/tools``) must not name a place under it."""
    monkeypatch.chdir(tmp_path)
    binary = tk.build_local(shipped("go"), Path("rel") / "tools")
    assert binary.is_absolute() and binary.parent == tmp_path / "rel" / "tools"
    assert tk.is_built(binary) and not list((REPO / "native" / "go").glob("rel"))
    text = tmp_path / "in.txt"
    text.write_bytes(b"hello relative world")
    merges = tk.conformance_merges(tmp_path / "rel" / "tools")
    out = tmp_path / "out.tok"
    tk.run_program("go", list(shipped("go").decl.run), binary, merges, text, out)
    assert out.stat().st_size > 0


@pytest.mark.skipif(shutil.which("go") is None, reason="go not installed (make system-deps)")
def test_failed_go_build_raises_with_the_compiler_message(tmp_path):
    native = copy_native(tmp_path, "go")
    main = native / "go" / "main.go"
    main.write_text(main.read_text().replace("func main() {", "func main() {\n\tundefinedThing()"))
    with pytest.raises(TokenizerBuildError) as info:
        tk.build_local(shipped("go", native), tmp_path / "tools")
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
        tk.build_local(shipped("rust", native), tmp_path / "tools")
    assert "cargo build --release failed (exit status 101)" in str(info.value)
    assert "mismatched types" in info.value.output


def test_missing_toolchain_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(tk.shutil, "which", lambda name: None)
    with pytest.raises(TokenizerBuildError, match=r"'go' is not on PATH; install the toolchain"):
        tk.build_local(shipped("go"), tmp_path / "empty-cache")


def test_missing_sources_say_where_they_were_looked_for(tmp_path):
    native = tmp_path / "native"
    native.mkdir()
    shutil.copy(REPO / "native" / "preprocessors.yaml", native / "preprocessors.yaml")
    with pytest.raises(TokenizerBuildError, match="source folder does not exist"):
        tk.build_local(shipped("rust", native), tmp_path)


def test_ids_output_is_read_and_refused_with_the_position_of_a_bad_word(tmp_path):
    good = tmp_path / "good.ids"
    good.write_bytes(b"1\n22\n 333\t4\n")
    assert tk.read_ids(good) == [1, 22, 333, 4]
    bad = tmp_path / "bad.ids"
    bad.write_bytes(b"1\n2\nx3\n")
    with pytest.raises(TokenizerError, match=r"id 2 is not a decimal integer: b'x3'"):
        tk.read_ids(bad)


def test_first_difference_finds_the_offset_or_the_shorter_length():
    assert tk.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert tk.first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert tk.first_difference([1, 2, 3], [1, 2]) == 2
    assert tk.first_difference([], [5]) == 0


def _python_preprocessor(tmp_path: Path, body: str) -> tk.Preprocessor:
    """A declared preprocessor whose "binary" is a Python script (the build copies it):
    the reference encoder, with ``body`` applied to its ids before they are written."""
    src = tmp_path / "pytok"
    src.mkdir(exist_ok=True)
    (src / "tok.py").write_text(
        "import sys\n"
        "from gcbench.tokenizer import Encoder, Merges\n"
        "a = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
        "ids = Encoder(Merges.load(a['--merges'])).encode(open(a['--in'], 'rb').read())\n"
        f"{body}\n"
        "open(a['--out'], 'w').write(''.join(f'{i}\\n' for i in ids))\n"
    )
    (src / "build.sh").write_text('#!/bin/sh\nprintf \'#!%s\\n\' "$PY" > "$1"; cat tok.py >> "$1"; chmod +x "$1"\n')
    decl = tk.PreprocessorDecl(
        source=str(src),
        sources=["*.py", "*.sh"],
        build={"command": ["sh", "build.sh", "{out}"], "env": {"PY": os.environ.get("PYTHON_FOR_TESTS", "")}},
        output="ids",
    )
    return tk.declared({"pytok": decl})["pytok"]


@pytest.fixture
def python_for_scripts(monkeypatch):
    import sys

    monkeypatch.setenv("PYTHON_FOR_TESTS", sys.executable)
    monkeypatch.setenv("PYTHONPATH", str(REPO / "plugins"))


def test_a_conformant_ids_preprocessor_is_built_checked_and_recorded(tmp_path, python_for_scripts):
    pre = _python_preprocessor(tmp_path, "pass")
    binary = tk.build_local(pre, tmp_path / "tools")
    record = tk.read_provenance(binary)
    assert record["name"] == "pytok" and record["conformance"]["passed"] is True
    assert record["conformance"]["ids"] > 100_000  # every input's ids were compared
    found, again = tk.conformant_binary(pre.spec_entry(), tmp_path / "tools")
    assert found == binary and again["binary_sha256"] == tk.sha256_of(binary)


def test_one_differing_id_fails_the_build_with_the_offset_and_both_ids(tmp_path, python_for_scripts):
    # the reference's ids with the 1000th id of every input longer than 1000 ids changed
    pre = _python_preprocessor(tmp_path, "ids = ids[:1000] + [ids[1000] ^ 1] + ids[1001:] if len(ids) > 1000 else ids")
    with pytest.raises(tk.ConformanceError) as info:
        tk.build_local(pre, tmp_path / "tools")
    err = info.value
    assert err.case == "one long byte run" and err.offset == 1000 and err.got == err.expected ^ 1
    assert f"offset 1000 (reference {err.expected}, pytok {err.got})" in str(err)
    # the binary is kept but marked: no trial of this version runs
    with pytest.raises(TokenizerBuildError, match="is not conformant: conformance check failed on input"):
        tk.conformant_binary(pre.spec_entry(), tmp_path / "tools")


def test_a_version_nobody_built_is_refused_by_the_trial(tmp_path, python_for_scripts):
    pre = _python_preprocessor(tmp_path, "pass")
    with pytest.raises(TokenizerBuildError, match=r"preprocessor pytok version [0-9a-f]{12} is not built"):
        tk.conformant_binary(pre.spec_entry(), tmp_path / "tools")


BUILT_IN_NAMES = {"go", "rust", "cargo", "external-go", "external-rust", "gcbench-tok-go", "gcbench-tok-rust"}


def special_cases(text: str) -> list[tuple[int, str]]:
    """(line, text) of every string constant of Python source ``text`` (docstrings aside)
    that names a built-in preprocessor, its path, binary or toolchain."""
    import ast

    tree = ast.parse(text)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (node.value in BUILT_IN_NAMES or any(n in node.value for n in BUILT_IN_NAMES if "-" in n))
    ]


def test_no_module_outside_the_declarations_names_a_built_in_preprocessor():
    """The built-ins are declarations (native/preprocessors.yaml), not branches: no code of
    the package names go, rust, their paths, binaries or toolchains."""
    package = REPO / "plugins" / "gcbench"
    found = [
        f"{path.relative_to(REPO)}:{line}: {text[:60]!r}"
        for path in sorted(package.rglob("*.py"))
        if path != package / "tokenizer" / "preprocessors.py"
        for line, text in special_cases(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "\n".join(found)


def test_the_check_finds_such_a_branch():
    planted = (
        '"""Module: go and rust may be named in prose."""\n'
        "def f(impl, path):\n"
        '    """go is fine in a docstring"""\n'
        '    if impl == "rust":\n'
        "        return 1\n"
        '    return path.startswith("external-go") or f"gcbench-tok-{impl}" == "x"\n'
    )
    assert special_cases(planted) == [(4, "rust"), (6, "external-go")]
