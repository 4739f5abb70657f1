"""Odd inputs, run through all three tokenizers: ``gcbench tokenize --impl python|go|rust``
gives the same token file, or the same error line and exit code, for anything the
operating system allows (issue 15): file names that are not UTF-8, with newlines or a
leading dash, empty paths and files, folders, missing or unreadable files, output
folders missing or not writable, malformed merges with any bytes, odd bytes, long lines,
long runs and a large file. The Go and Rust programs, run directly, also agree with each
other byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from tok_vectors import VECTORS, letters_lcg

from gcbench.tokenizer import default_corpus

IMPLS = ("python", "go", "rust")


def raw(name: bytes) -> str:
    """A file name from raw bytes, as Python holds it (surrogateescape)."""
    return os.fsdecode(name)


@dataclass(frozen=True)
class Case:
    """One odd input: ``make(folder) -> (merges, corpus, out)`` path strings."""

    name: str
    make: Callable[[Path], tuple[str, str, str]]
    fails: int = 0  # expected exit code (0: a token file is written)


def _vector_merges(d: Path) -> str:
    path = d / "merges.txt"
    path.write_bytes((VECTORS / "merges.txt").read_bytes())
    return str(path)


def _corpus(d: Path, data: bytes, name: str = "corpus.txt") -> str:
    path = d / name
    path.write_bytes(data)
    return str(path)


def ok_with(data: bytes | Callable[[], bytes], corpus_name: str = "corpus.txt", out_name: str = "out.tok"):
    def make(d: Path):
        content = data() if callable(data) else data
        return _vector_merges(d), _corpus(d, content, corpus_name), str(d / out_name)

    return make


def bad_merges(content: bytes):
    def make(d: Path):
        path = d / "bad-merges.txt"
        path.write_bytes(content)
        return str(path), _corpus(d, b"hello"), str(d / "out.tok")

    return make


def corpus_at(path_of: Callable[[Path], str]):
    def make(d: Path):
        return _vector_merges(d), path_of(d), str(d / "out.tok")

    return make


def merges_at(path_of: Callable[[Path], str]):
    def make(d: Path):
        return path_of(d), _corpus(d, b"hello"), str(d / "out.tok")

    return make


def out_at(path_of: Callable[[Path], str]):
    def make(d: Path):
        return _vector_merges(d), _corpus(d, b"hello world"), path_of(d)

    return make


def _folder(d: Path, name: str = "folder") -> Path:
    (d / name).mkdir(exist_ok=True)
    return d / name


def _symlink_loop(d: Path) -> str:
    (d / "loop-a").symlink_to("loop-b")
    (d / "loop-b").symlink_to("loop-a")
    return str(d / "loop-a")


def _unreadable(d: Path) -> str:
    path = Path(_corpus(d, b"secret"))
    path.chmod(0)
    try:
        path.read_bytes()
    except PermissionError:
        return str(path)
    pytest.skip("a file without read permission is still readable here (root)")


def _read_only_folder(d: Path) -> str:
    folder = _folder(d, "read-only")
    folder.chmod(0o555)
    try:
        (folder / "probe").write_bytes(b"")
    except PermissionError:
        return str(folder / "out.tok")
    pytest.skip("a folder without write permission is still writable here (root)")


ODD_BYTES = bytes(range(256)) + b"\x00\x00\r\n\r\r\n \t\x0b\x0c" + b"\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80\xff\xfe"

CASES = [
    # file names: any bytes but "/" and NUL
    Case("corpus name not utf-8", ok_with(b"hello world", corpus_name=raw(b"corpus-\xff\xfe.txt"))),
    Case("output name not utf-8", ok_with(b"hello world", out_name=raw(b"out-\x80\xc3.tok"))),
    Case("names with newline, tab and leading dash", ok_with(b"hello", "-corpus\n\t.txt", "-out\n.tok")),
    Case("missing corpus, name not utf-8", corpus_at(lambda d: str(d / raw(b"missing-\xff.txt"))), fails=5),
    Case("missing merges, name with newline", merges_at(lambda d: str(d / "no\nmerges.txt")), fails=3),
    Case("empty corpus path", corpus_at(lambda d: ""), fails=5),
    Case("empty output path", out_at(lambda d: ""), fails=6),
    Case("corpus name too long", corpus_at(lambda d: str(d / ("x" * 300))), fails=5),
    Case("corpus under a file", corpus_at(lambda d: _corpus(d, b"x", "file") + "/corpus.txt"), fails=5),
    Case("corpus symlink loop", corpus_at(_symlink_loop), fails=5),
    # folders and unreadable files
    Case("corpus is a folder", corpus_at(lambda d: str(_folder(d))), fails=5),
    Case("corpus is a folder, trailing slash", corpus_at(lambda d: str(_folder(d)) + "/"), fails=5),
    Case("corpus with a trailing slash", corpus_at(lambda d: _corpus(d, b"x") + "/"), fails=5),
    Case("merges is a folder", merges_at(lambda d: str(_folder(d))), fails=3),
    Case("corpus unreadable (input/output error)", corpus_at(lambda d: "/proc/self/mem"), fails=5),
    Case("corpus without read permission", corpus_at(_unreadable), fails=5),
    # outputs
    Case("output folder missing", out_at(lambda d: str(d / "no" / "such" / "out.tok")), fails=6),
    Case("output is a folder", out_at(lambda d: str(_folder(d))), fails=6),
    Case("output names a folder (trailing slash)", out_at(lambda d: str(d / "new") + "/"), fails=6),
    Case("output names a folder (dot)", out_at(lambda d: str(d) + "/."), fails=6),
    Case("output under a file", out_at(lambda d: _corpus(d, b"x", "file") + "/out.tok"), fails=6),
    Case("output folder where nothing can be created", out_at(lambda d: "/proc/self/out.tok"), fails=6),
    Case("output folder without write permission", out_at(_read_only_folder), fails=6),
    Case("output replaces an existing file", out_at(lambda d: _corpus(d, b"old", "out.tok"))),
    # merges files
    Case("merges file empty", bad_merges(b""), fails=4),
    Case("merges id with bytes that are not utf-8", bad_merges(b'gcbench-bpe-merges v1 1\n\xff"\\ 98\n'), fails=4),
    Case("merges version not utf-8", bad_merges(b"gcbench-bpe-merges v\xc3\xa9\x00 0\n"), fails=4),
    Case("merges header only, binary junk", bad_merges(bytes(range(256)) + b"\n"), fails=4),
    Case("merges making bytes twice", bad_merges(b"gcbench-bpe-merges v1 4\n97 98\n256 99\n98 99\n97 258\n"), fails=4),
    Case("merges id too large", bad_merges(b"gcbench-bpe-merges v1 1\n4294967296 1\n"), fails=4),
    Case("merges count mismatch, truncated", bad_merges(b"gcbench-bpe-merges v1 2\n97 98"), fails=4),
    Case("merges with crlf", bad_merges(b"gcbench-bpe-merges v1 1\r\n97 98\r\n"), fails=4),
    # contents
    Case("empty corpus", ok_with(b"")),
    Case("one byte", ok_with(b"\xff")),
    Case("every byte value and invalid utf-8", ok_with(ODD_BYTES * 3)),
    Case("a line of 2 MB of letters", ok_with(lambda: letters_lcg(2_000_000, 11))),
    Case("1 MB of spaces then a word", ok_with(lambda: b" " * 1_000_000 + b"word")),
    Case("1 MB of NUL bytes", ok_with(lambda: b"\x00" * 1_000_000)),
    Case(
        "long runs of each class",
        ok_with(lambda: b"9" * 300_000 + b"\r\n" * 200_000 + b"\xc3\xa9" * 200_000 + b"-=" * 100_000),
    ),
]


def run_cli(impl: str, merges: str, corpus: str, out: str, cache: Path, monkeypatch, capsysbinary):
    """``gcbench tokenize`` in this process (gcbench.cli.main): exit code, stdout, stderr
    (bytes: file names are printed as their own bytes)."""
    from gcbench.cli import main

    monkeypatch.setattr(
        sys,
        "argv",
        [
            "gcbench",
            "tokenize",
            "--impl",
            impl,
            "--merges",
            merges,
            "--in",
            corpus,
            "--out",
            out,
            "--cache-dir",
            str(cache),
        ],
    )
    with pytest.raises(SystemExit) as exit_:
        main()
    captured = capsysbinary.readouterr()
    return exit_.value.code or 0, captured.out, captured.err


def outcome(impl, case, folder, cache, monkeypatch, capsysbinary):
    """(exit code, stdout up to the implementation's name, stderr, token file, temp files
    left), with the case's folder written as <dir>."""
    merges, corpus, out = case.make(folder)
    code, stdout, stderr = run_cli(impl, merges, corpus, out, cache, monkeypatch, capsysbinary)
    written = None
    if code == 0:
        written = Path(out).read_bytes()
        stdout = stdout.split(b" with ")[0]  # "<out>: N tokens from M bytes" (then impl and timings)
        os.unlink(out)
    leftovers = sorted(p.name for p in folder.rglob(".*.tmp*"))
    here = os.fsencode(folder)
    return code, stdout.replace(here, b"<dir>"), stderr.replace(here, b"<dir>"), written, leftovers


@pytest.fixture(scope="module")
def both_binaries(request):
    return {impl: request.getfixturevalue(f"{impl}_binary") for impl in ("go", "rust")}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_implementation_gives_the_same_token_file_or_the_same_error(
    case, tmp_path, tools_cache, both_binaries, monkeypatch, capsysbinary
):
    results = {}
    for impl in IMPLS:
        folder = tmp_path / impl  # the same names, in a folder per implementation
        folder.mkdir()
        monkeypatch.chdir(folder)
        results[impl] = outcome(impl, case, folder, tools_cache, monkeypatch, capsysbinary)
    code, stdout, stderr, written, leftovers = results["python"]
    assert code == case.fails, stderr
    if case.fails:
        assert stderr.startswith(b"error: ") and stderr.endswith(b"\n") and written is None
        assert b"Traceback" not in stderr
    else:
        assert written[:8] == b"GCBTOKEN" and stderr == b""
    assert leftovers == []
    for impl in ("go", "rust"):
        assert results[impl] == results["python"], impl


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_go_and_rust_programs_agree_byte_for_byte(case, tmp_path, both_binaries):
    results = {}
    for impl, binary in both_binaries.items():
        folder = tmp_path / impl
        folder.mkdir()
        merges, corpus, out = case.make(folder)
        proc = subprocess.run(
            [binary, "--merges", merges, "--in", corpus, "--out", out], capture_output=True, cwd=folder
        )
        written = Path(out).read_bytes() if proc.returncode == 0 else None
        stderr = proc.stderr.replace(f"gcbench-tok-{impl}".encode(), b"<prog>").replace(os.fsencode(folder), b"<dir>")
        results[impl] = (proc.returncode, stderr, written)
    assert results["go"] == results["rust"]
    assert results["go"][0] == case.fails
    if case.fails:  # one line (a path may hold a newline), never a panic or a trace
        assert results["go"][1].startswith(b"<prog>: error: ") and results["go"][1].endswith(b"\n")
        assert b"panic" not in results["go"][1] and b"goroutine" not in results["go"][1]


@pytest.mark.slow
def test_a_large_file_gives_the_same_token_file_everywhere(
    tmp_path, tools_cache, both_binaries, monkeypatch, capsysbinary
):
    # ~30 MB: prose, long runs, a 2 MB line, every byte value (truly huge files are
    # bounded by memory, not by the code: positions are 64-bit where a chunk needs it).
    prose = default_corpus()
    data = prose * 40 + b" " * 3_000_000 + letters_lcg(2_000_000, 5) + b"\x00" * 2_000_000 + ODD_BYTES * 4000
    assert len(data) > 25_000_000
    case = Case("large", ok_with(data))
    tokens = {}
    for impl in IMPLS:
        folder = tmp_path / impl
        folder.mkdir()
        code, stdout, stderr, written, _ = outcome(impl, case, folder, tools_cache, monkeypatch, capsysbinary)
        assert code == 0, stderr
        tokens[impl] = written
    assert tokens["go"] == tokens["python"] and tokens["rust"] == tokens["python"]
    assert int.from_bytes(tokens["python"][24:32], "little") > 5_000_000
