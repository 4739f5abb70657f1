"""The shared vectors (tests/vectors/) against the Python reference; Go and Rust check
the same file in go test and cargo test."""

from __future__ import annotations

from tok_vectors import ids_sha256, letters_lcg

from gcbench.tokenizer import Encoder

REQUIRED = {
    "ascii_sentence",
    "whitespace_runs",
    "emoji",
    "four_byte_code_points",
    "combining_marks",
    "cjk",
    "right_to_left",
    "invalid_utf8",
    "empty",
    "long_run_spaces",
}


def test_vectors_cover_every_required_kind_of_input(vectors):
    names = {name for name, _, _ in vectors.cases}
    assert REQUIRED <= names
    assert any(length >= 1_000_000 for _, _, length, _, _, _ in vectors.generated)
    invalid = dict((n, d) for n, d, _ in vectors.cases)["invalid_utf8"]
    try:
        invalid.decode("utf-8")
        raise AssertionError("invalid_utf8 case decodes as UTF-8")
    except UnicodeDecodeError:
        pass


def test_vector_merges_have_the_recorded_sha256(vector_merges, vectors):
    assert vector_merges.sha256 == vectors.merges_sha256
    assert vector_merges.vocab_size == 2048


def test_every_vector_case_gives_its_ids(vector_merges, vectors):
    for name, data, ids in vectors.cases:
        assert Encoder(vector_merges).encode(data) == ids, name


def test_one_megabyte_line_without_spaces_gives_its_ids(vector_merges, vectors):
    for name, generator, length, seed, count, sha in vectors.generated:
        assert generator == "letters-lcg"
        data = letters_lcg(length, seed)
        assert b" " not in data and b"\n" not in data
        ids = Encoder(vector_merges).encode(data)
        assert (len(ids), ids_sha256(ids)) == (count, sha), name
