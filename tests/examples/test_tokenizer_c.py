"""examples/tokenizer-c: the C tokenizer gives the ids of the Python reference encoder.

``tok-c --merges MERGES --in CORPUS --out IDS`` is compiled here with ``cc -O2 -std=c99``
(skipped only where no ``cc`` exists) and run on the inputs the Go and Rust ports are
checked with (tests/tokenizer/test_native.py, test_odd_inputs.py, tests/vectors/):
empty input, long runs of one byte, invalid UTF-8, long lines, mixed whitespace and
Unicode, Python's default corpus with merges trained on it, random bytes (hypothesis),
and the error exits 2..6 with their one-line messages.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcbench.tokenizer import Encoder, Merges, MergesError, default_corpus, train

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "examples" / "tokenizer-c" / "tok.c"
VECTORS = REPO / "tests" / "vectors"
PROG = b"tok-c: error: "

# as tests/tokenizer/test_odd_inputs.py: every byte value, CR/LF mixes, invalid UTF-8
# (a surrogate, an overlong form, a code point above U+10FFFF, stray continuation bytes)
ODD_BYTES = bytes(range(256)) + b"\x00\x00\r\n\r\r\n \t\x0b\x0c" + b"\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80\xff\xfe"


def letters_lcg(length: int, seed: int) -> bytes:
    """The ``letters-lcg`` generator of tests/vectors/README.md (as tests/tokenizer/tok_vectors.py)."""
    out = bytearray(length)
    x = seed & 0xFFFFFFFF
    for i in range(length):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = 97 + (x >> 16) % 26
    return bytes(out)


@pytest.fixture(scope="module")
def tok_c(tmp_path_factory) -> Path:
    """The binary, built as the README says: ``cc -O2 -std=c99 -o tok-c tok.c``."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) on this machine")
    binary = tmp_path_factory.mktemp("tok-c") / "tok-c"
    proc = subprocess.run(
        ["cc", "-O2", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-o", str(binary), str(SOURCE)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # no warnings either
    return binary


@pytest.fixture(scope="module")
def vector_merges() -> tuple[Merges, Path]:
    path = VECTORS / "merges.txt"
    return Merges.load(path), path


@pytest.fixture(scope="module")
def corpus_merges(tmp_path_factory) -> tuple[Merges, Path]:
    """Merges trained on the default corpus (4096 ids, as a TinyLM run uses)."""
    merges = train(default_corpus(), 4096)
    return merges, merges.save(tmp_path_factory.mktemp("merges") / "corpus-merges.txt")


def run_tok(binary: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, cwd=cwd, timeout=120)


def c_ids(binary: Path, merges_path: Path, data: bytes, folder: Path) -> list[int]:
    """The ids tok-c writes for ``data``; asserts the output contract (decimal, "\\n" after each)."""
    corpus = folder / "corpus.bin"
    corpus.write_bytes(data)
    out = folder / "ids.txt"
    proc = run_tok(binary, "--merges", str(merges_path), "--in", str(corpus), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"" and proc.stderr == b""
    text = out.read_bytes()
    ids = [int(line) for line in text.split(b"\n")[:-1]]
    assert text == b"".join(b"%d\n" % i for i in ids)  # nothing else: no blank line, no sign, no padding
    assert not list(folder.glob(".*.tmp*"))
    return ids


def assert_same_ids(binary: Path, merges: tuple[Merges, Path], data: bytes, folder: Path) -> list[int]:
    expected = Encoder(merges[0]).encode(data)
    got = c_ids(binary, merges[1], data, folder)
    if got != expected:  # the first differing offset, not a 100 000-line diff
        at = next(
            (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected))
        )
        pytest.fail(f"ids differ at {at}: tok-c {got[at : at + 5]}, reference {expected[at : at + 5]}")
    return got


CONTENTS = {
    "empty": b"",
    "one byte": b"\xff",
    "200 KB of a": b"a" * 200_000,
    "200 KB of 0xff": b"\xff" * 200_000,
    "1 MB of spaces then a word": b" " * 1_000_000 + b"word",
    "1 MB of NUL bytes": b"\x00" * 1_000_000,
    "every byte value and invalid utf-8": ODD_BYTES * 3,
    "a 500 KB line of letters": letters_lcg(500_000, 11),
    "long lines of words": (b"word " * 40_000 + b"\n") * 3,
    "long runs of each class": b"9" * 100_000 + b"\r\n" * 50_000 + "é".encode() * 50_000 + b"-=" * 30_000,
    "mixed whitespace, tabs, newlines and unicode": (
        " \t\n  x\r\n\r\n   \x0b\x0cy  \t z\n\n\n  héllo wörld — 日本語 テキスト 🙂🙂 ¿qué? 12 345  6,7 !!!\t\t\n".encode()
        * 500
    ),
    "spaces before words, digits and punctuation": b"  a   1    ,     b\t c\n d  " * 2000,
}


@pytest.mark.parametrize("name", list(CONTENTS))
def test_ids_equal_the_reference_with_the_vector_merges(name, tok_c, vector_merges, tmp_path):
    ids = assert_same_ids(tok_c, vector_merges, CONTENTS[name], tmp_path)
    assert (ids == []) == (CONTENTS[name] == b"")


@pytest.mark.parametrize("name", ["200 KB of a", "200 KB of 0xff", "every byte value and invalid utf-8"])
def test_ids_equal_the_reference_with_merges_trained_on_the_corpus(name, tok_c, corpus_merges, tmp_path):
    assert_same_ids(tok_c, corpus_merges, CONTENTS[name], tmp_path)


def test_the_default_corpus_with_merges_trained_on_it(tok_c, corpus_merges, tmp_path):
    corpus = default_corpus()
    ids = assert_same_ids(tok_c, corpus_merges, corpus, tmp_path)
    assert 50_000 < len(ids) < len(corpus) / 2  # merges were applied
    assert max(ids) >= 4000


def test_more_distinct_chunks_than_the_cache_holds(tok_c, vector_merges, tmp_path):
    # 270 000 distinct chunks " <n>": both caches are emptied once on the way (2**18 entries)
    data = b"".join(b" %d" % i for i in range(270_000)) + b" 5 17 123456 99"
    encoder = Encoder(vector_merges[0])
    expected = encoder.encode(data)
    assert len(encoder._cache) < 270_000 - 2**18 + 10  # the reference's was emptied
    assert c_ids(tok_c, vector_merges[1], data, tmp_path) == expected


def test_ids_above_65535_and_binary_input(tok_c, tmp_path):
    # every pair of two bytes is a merge (vocab 65792), as test_native's uint32 case
    merges = Merges(tuple((left, right) for left in range(256) for right in range(256)))
    path = merges.save(tmp_path / "pairs.txt")
    data = bytes(range(256)) * 4 + b" \xff\xfe\n\xff\xff\n" + letters_lcg(5000, 7)
    ids = assert_same_ids(tok_c, (merges, path), data, tmp_path)
    assert max(ids) > 65535


def _vector_cases():
    """tests/vectors/cases.txt: (name, input, reference ids) and the generated 1 MB line."""
    cases, generated = [], []
    for line in (VECTORS / "cases.txt").read_text(encoding="ascii").splitlines():
        f = line.split(" ")
        if f[0] == "case":
            ids = [] if f[3] == "-" else [int(x) for x in f[3].split(",")]
            cases.append((f[1], b"" if f[2] == "-" else bytes.fromhex(f[2]), ids))
        elif f[0] == "gen":
            generated.append((f[1], int(f[3]), int(f[4]), int(f[5]), f[6]))
    return cases, generated


def test_the_shared_vectors(tok_c, vector_merges, tmp_path):
    cases, generated = _vector_cases()
    assert len(cases) > 20 and generated
    for name, data, expected in cases:
        assert c_ids(tok_c, vector_merges[1], data, tmp_path) == expected, name
    for name, length, seed, count, sha in generated:
        ids = c_ids(tok_c, vector_merges[1], letters_lcg(length, seed), tmp_path)
        assert len(ids) == count, name
        assert hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest() == sha, name


FRAGMENTS = [b" ", b"  ", b"\t", b"\n", b"\r\n", b"\x0b\x0c", b"the", b"Token", b"42", b"7", b"!?", b"--"]
FRAGMENTS += ["é".encode(), "日本".encode(), "🙂".encode(), b"\xff", b"\x80\x80", b"\xc3", b"\x00", b"aaaa"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=2000),
        st.lists(st.sampled_from(FRAGMENTS), max_size=400).map(b"".join),
    )
)
def test_random_bytes_give_the_reference_ids(data, tok_c, vector_merges, tmp_path):
    assert_same_ids(tok_c, vector_merges, data, tmp_path)


def test_a_long_run_takes_linear_ish_time(tok_c, corpus_merges, tmp_path):
    # 4 MB of one byte whose pairs merge ("--" is merge 1): a quadratic merge would not
    # finish within run_tok's timeout
    data = b"-" * 4_000_000
    assert corpus_merges[0].pairs[1] == (45, 45)
    ids = assert_same_ids(tok_c, corpus_merges, data, tmp_path)
    assert len(ids) < len(data) / 4


# --- errors: exit code and one line "tok-c: error: <path>: <message>" -------------------------


def _error(proc: subprocess.CompletedProcess, code: int, path: str | None = None) -> str:
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == b""
    assert proc.stderr.startswith(PROG) and proc.stderr.endswith(b"\n") and proc.stderr.count(b"\n") == 1
    if path is not None:
        assert proc.stderr.startswith(PROG + os.fsencode(path) + b": ")
    return proc.stderr.decode(errors="surrogateescape")


BAD_MERGES = [
    b"",
    b'gcbench-bpe-merges v1 1\n\xff"\\ 98\n',
    b"gcbench-bpe-merges v\xc3\xa9\x00 0\n",
    bytes(range(256)) + b"\n",
    b"gcbench-bpe-merges v1 4\n97 98\n256 99\n98 99\n97 258\n",  # bytes "abc" twice
    b"gcbench-bpe-merges v1 1\n4294967296 1\n",
    b"gcbench-bpe-merges v1 1\n2147483648 1\n",
    b"gcbench-bpe-merges v1 2\n97 98",  # truncated
    b"gcbench-bpe-merges v1 1\r\n97 98\r\n",
    b"gcbench-bpe-merges v1 1\n300 1\n",  # id not smaller than the id it makes
    b"gcbench-bpe-merges v1 2\n97 98\n",  # count mismatch
    b"gcbench-bpe-merges v1 01\n97 98\n",
    b"gcbench-bpe-merges v1 1\n97  98\n",
    b"gcbench-bpe-merges v1 1\n97 98 99\n",
    b"gcbench-bpe-merges v1 2\n97 98\n300 1x\n",
    b"gcbench-bpe-merges v1 3\n97 300\n97 98\n1x 2\n",  # two faults: the reference reports line 4 first
    b"gcbench-bpe-merges  v1 0\n",
]


@pytest.mark.parametrize("content", BAD_MERGES, ids=range(len(BAD_MERGES)))
def test_corrupt_merges_exit_4_with_the_reference_message(content, tok_c, tmp_path):
    path = tmp_path / "bad-merges.txt"
    path.write_bytes(content)
    (tmp_path / "c.txt").write_bytes(b"hello")
    with pytest.raises(MergesError) as reference:
        Merges.load(path)
    proc = run_tok(tok_c, "--merges", str(path), "--in", str(tmp_path / "c.txt"), "--out", str(tmp_path / "o.txt"))
    line = _error(proc, 4, str(path))
    where = f"line {reference.value.line}: " if reference.value.line is not None else ""
    assert line == f"tok-c: error: {path}: {where}{reference.value.message}\n"
    assert not (tmp_path / "o.txt").exists()


def test_unreadable_files_and_unwritable_outputs(tok_c, vector_merges, tmp_path):
    merges = str(vector_merges[1])
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"hello world")
    folder = tmp_path / "folder"
    folder.mkdir()
    out = str(tmp_path / "o.txt")
    cases = [
        (3, str(tmp_path / "missing.txt"), str(corpus), out, "cannot read merges file: No such file or directory"),
        (3, str(folder), str(corpus), out, "cannot read merges file: Is a directory"),
        (5, merges, str(tmp_path / "none.txt"), out, "cannot read corpus: No such file or directory"),
        (5, merges, "", out, "cannot read corpus: No such file or directory"),
        (5, merges, str(folder), out, "cannot read corpus: Is a directory"),
        (5, merges, str(corpus) + "/", out, "cannot read corpus: Not a directory"),
        (6, merges, str(corpus), str(tmp_path / "no" / "dir" / "o.txt"), "cannot write ids file: No such file or"),
        (6, merges, str(corpus), str(folder), "cannot write ids file: Is a directory"),
        (6, merges, str(corpus), str(tmp_path / "new") + "/", "cannot write ids file: Is a directory"),
        (6, merges, str(corpus), "", "cannot write ids file: No such file or directory"),
    ]
    for code, m, c, o, message in cases:
        proc = run_tok(tok_c, "--merges", m, "--in", c, "--out", o)
        at = {3: m, 5: c, 6: o}[code]
        assert message in _error(proc, code, at), (code, m, c, o)
    assert not (tmp_path / "o.txt").exists()
    assert not list(tmp_path.rglob(".*.tmp*"))


def test_an_existing_output_is_replaced(tok_c, vector_merges, tmp_path):
    out = tmp_path / "ids.txt"
    out.write_bytes(b"old content\n" * 1000)
    ids = c_ids(tok_c, vector_merges[1], b"hello world", tmp_path)
    assert out.read_bytes() == b"".join(b"%d\n" % i for i in ids)


def test_flag_forms_and_names_with_odd_bytes(tok_c, vector_merges, tmp_path):
    corpus = tmp_path / "-corpus\n\t.txt"
    corpus.write_bytes(b"hello world")
    out = os.fsdecode(b"-out-\xff.txt")
    expected = Encoder(vector_merges[0]).encode(b"hello world")
    proc = run_tok(tok_c, f"-merges={vector_merges[1]}", "--in", corpus.name, f"--out={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / out).read_bytes() == b"".join(b"%d\n" % i for i in expected)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--merges", "m", "--in", "c"],
        ["--merges", "m", "--in", "c", "--out"],
        ["--merges", "m", "--in", "c", "--out", "o", "extra"],
        ["--merges", "m", "--in", "c", "--out", "o", "--stats"],
        ["merges", "m"],
    ],
)
def test_a_bad_command_line_exits_2(args, tok_c, tmp_path):
    proc = run_tok(tok_c, *args, cwd=tmp_path)
    assert "usage: tok-c --merges MERGES --in CORPUS --out IDS" in _error(proc, 2)
    assert not any(tmp_path.iterdir())


def test_help_exits_0(tok_c):
    proc = run_tok(tok_c, "--help")
    assert proc.returncode == 0 and proc.stdout.startswith(b"usage: tok-c ")
