"""``gcbench tokenizer train`` and ``gcbench tokenize``: outputs and exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tok_vectors import REPO

from gcbench.tokenizer import Encoder, Merges, read_tokens


def gcbench(*args, env_home=None):
    import os

    env = dict(os.environ, PYTHONPATH=str(REPO / "plugins"))
    if env_home:
        env["GCBENCH_HOME"] = str(env_home)
    return subprocess.run(
        [sys.executable, "-m", "gcbench.cli", *map(str, args)], capture_output=True, text=True, env=env
    )


def test_train_then_tokenize_with_python_writes_a_readable_token_file(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"the cat sat on the mat; the cat ate the rat. " * 50)
    merges_path = tmp_path / "m.txt"
    train = gcbench("tokenizer", "train", corpus, "--vocab-size", 270, "--out", merges_path)
    assert train.returncode == 0, train.stderr
    merges = Merges.load(merges_path)
    assert merges.vocab_size == 270 and merges.sha256 in train.stdout
    tok = gcbench("tokenize", "--impl", "python", "--merges", merges_path, "--in", corpus, "--out", tmp_path / "t.tok")
    assert tok.returncode == 0, tok.stderr
    ids = read_tokens(tmp_path / "t.tok", merges)
    assert ids.tolist() == Encoder(merges).encode(corpus.read_bytes())
    assert len(ids) < 2300 / 3


@pytest.mark.parametrize("impl", ["python", "go", "rust"])
def test_tokenize_reports_a_corrupt_merges_file_in_one_line_with_exit_code_4(impl, tmp_path, tools_cache, request):
    if impl != "python":
        request.getfixturevalue(f"{impl}_binary")  # built (or skipped) once per session
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"gcbench-bpe-merges v1 3\n97 98\n")
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"abc")
    res = gcbench(
        "tokenize",
        "--impl",
        impl,
        "--merges",
        bad,
        "--in",
        corpus,
        "--out",
        tmp_path / "t.tok",
        "--cache-dir",
        tools_cache,
    )
    assert res.returncode == 4
    assert res.stderr.strip() == f"error: {bad}: corrupt merges file: header announces 3 merges but the file has 1"


def test_train_reports_an_unreadable_corpus_with_exit_code_5(tmp_path):
    res = gcbench("tokenizer", "train", tmp_path / "none.txt", "--vocab-size", 300, "--out", tmp_path / "m.txt")
    assert res.returncode == 5
    assert res.stderr.strip() == f"error: {tmp_path / 'none.txt'}: cannot read corpus: No such file or directory"


def test_tokenize_prints_file_names_as_their_bytes_whatever_the_terminal_encoding(tmp_path):
    import os

    corpus = tmp_path / os.fsdecode(b"corpus-\xff.txt")
    corpus.write_bytes(b"hello world")
    out = tmp_path / os.fsdecode(b"out-\xfe.tok")
    env = dict(os.environ, PYTHONPATH=str(REPO / "plugins"), PYTHONIOENCODING="utf-8")  # strict: no surrogates
    argv = [sys.executable, "-m", "gcbench.cli", "tokenize", "--merges", str(REPO / "tests" / "vectors" / "merges.txt")]
    ok = subprocess.run([*argv, "--in", str(corpus), "--out", str(out)], capture_output=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(os.fsencode(out) + b": 6 tokens from 11 bytes with python")
    missing = tmp_path / os.fsdecode(b"missing-\xff.txt")
    bad = subprocess.run([*argv, "--in", str(missing), "--out", str(out)], capture_output=True, env=env)
    assert bad.returncode == 5
    assert bad.stderr == b"error: " + os.fsencode(missing) + b": cannot read corpus: No such file or directory\n"


def test_tokenize_takes_an_empty_path_as_a_missing_file_not_the_current_folder(tmp_path):
    res = gcbench(
        "tokenize", "--merges", REPO / "tests" / "vectors" / "merges.txt", "--in", "", "--out", tmp_path / "t.tok"
    )
    assert res.returncode == 5
    assert res.stderr == "error: : cannot read corpus: No such file or directory\n"
