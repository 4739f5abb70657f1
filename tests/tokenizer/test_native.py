"""gcbench.tokenizer.native and the built binaries: the Go and Rust programs write the
same token file as the Python reference, byte for byte, and fail alike."""

from __future__ import annotations

import pytest
from tok_vectors import letters_lcg

from gcbench.tokenizer import (
    CorpusError,
    Encoder,
    Merges,
    MergesError,
    MergesNotFoundError,
    OutputError,
    default_corpus,
    read_tokens,
    train,
    write_tokens,
)
from gcbench.tokenizer.native import run_native


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "topics.txt"
    path.write_bytes(default_corpus())
    return path


@pytest.fixture(scope="module")
def corpus_merges(tmp_path_factory):
    """Merges trained on the real corpus (4096 ids, as a TinyLM run would use)."""
    merges = train(default_corpus(), 4096)
    return merges, merges.save(tmp_path_factory.mktemp("merges") / "merges.txt")


@pytest.mark.parametrize("impl", ["go", "rust"])
def test_native_token_file_equals_the_python_reference_on_the_real_corpus(
    impl, request, tmp_path, corpus_file, corpus_merges
):
    binary = request.getfixturevalue(f"{impl}_binary")
    merges, merges_path = corpus_merges
    reference = tmp_path / "python.tok"
    write_tokens(reference, Encoder(merges).encode(corpus_file.read_bytes()), merges)
    out = tmp_path / f"{impl}.tok"
    run = run_native(binary, merges_path, corpus_file, out)
    assert out.read_bytes() == reference.read_bytes()
    assert (run.impl, run.bytes) == (impl, corpus_file.stat().st_size)
    assert run.tokens == len(read_tokens(out, merges)) > 100_000
    assert run.encode_s > 0


@pytest.mark.parametrize("impl", ["go", "rust"])
def test_native_token_file_equals_the_reference_for_uint32_ids_and_binary_input(impl, request, tmp_path):
    binary = request.getfixturevalue(f"{impl}_binary")
    merges = Merges(tuple((left, right) for left in range(256) for right in range(256)))  # vocab 65792
    merges_path = merges.save(tmp_path / "pairs.txt")
    data = bytes(range(256)) * 4 + b" \xff\xfe\n" + letters_lcg(5000, 7)
    corpus = tmp_path / "c.bin"
    corpus.write_bytes(data)
    reference = tmp_path / "python.tok"
    write_tokens(reference, Encoder(merges).encode(data), merges)
    run_native(binary, merges_path, corpus, tmp_path / "n.tok")
    assert (tmp_path / "n.tok").read_bytes() == reference.read_bytes()
    assert reference.read_bytes()[12] == 4  # itemsize 4


@pytest.mark.parametrize("impl", ["go", "rust"])
def test_native_faults_raise_the_python_reference_exceptions(impl, request, tmp_path, vectors):
    binary = request.getfixturevalue(f"{impl}_binary")
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"hello")
    corrupt = tmp_path / "bad.txt"
    corrupt.write_bytes(b"gcbench-bpe-merges v1 1\n300 1\n")
    good = vectors.merges_path
    with pytest.raises(MergesNotFoundError, match="cannot read merges file: No such file or directory$") as e3:
        run_native(binary, tmp_path / "missing.txt", corpus, tmp_path / "o.tok")
    with pytest.raises(MergesError, match="not smaller than the id it makes") as e4:
        run_native(binary, corrupt, corpus, tmp_path / "o.tok")
    with pytest.raises(CorpusError, match="cannot read corpus") as e5:
        run_native(binary, good, tmp_path / "none.txt", tmp_path / "o.tok")
    with pytest.raises(OutputError, match="cannot write token file") as e6:
        run_native(binary, good, corpus, tmp_path / "no" / "dir" / "o.tok")
    assert (e3.value.exit_code, e4.value.exit_code, e5.value.exit_code, e6.value.exit_code) == (3, 4, 5, 6)
    assert e4.value.line == 2 and e4.value.path == str(corrupt)
    assert not (tmp_path / "o.tok").exists()
