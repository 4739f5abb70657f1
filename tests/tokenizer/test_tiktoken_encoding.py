"""gcbench.tokenizer.tiktoken_encoding: tiktoken built from our merges gives our ids
(and where it could not, the difference is the documented one)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.tokenizer import Encoder, Merges, default_corpus, train

pytest.importorskip("tiktoken")

from tok_vectors import letters_lcg  # noqa: E402

from gcbench.tokenizer.tiktoken_encoding import differing_chunks, tiktoken_encoding  # noqa: E402


@pytest.fixture(scope="module")
def tt(vector_merges):
    return tiktoken_encoding(vector_merges)


def test_tiktoken_gives_the_reference_ids_on_every_valid_utf8_vector(tt, vectors):
    checked = 0
    for name, data, ids in vectors.cases:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # tiktoken takes str only
        assert tt.encode_ordinary(text) == ids, name
        checked += 1
    assert checked >= 18


def test_tiktoken_gives_the_reference_ids_on_the_real_corpus_with_trained_merges():
    corpus = default_corpus()
    merges = train(corpus, 4096)
    assert tiktoken_encoding(merges).encode_ordinary(corpus.decode("utf-8")) == Encoder(merges).encode(corpus)
    assert differing_chunks(merges, corpus.decode("utf-8"))[0] == 0


@pytest.mark.parametrize(
    "text",
    [" " * 100_000, "-" * 50_001, "\n\n " * 9_000, letters_lcg(200_000, 5).decode()],
    ids=["spaces", "dashes", "newlines", "letters"],
)
def test_tiktoken_gives_the_reference_ids_on_long_chunks(tt, vector_merges, text):
    assert tt.encode_ordinary(text) == Encoder(vector_merges).encode(text.encode("utf-8"))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_tiktoken_agrees_on_arbitrary_unicode_text(tt, vector_merges, text):
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return  # lone surrogates are not valid UTF-8
    assert tt.encode_ordinary(text) == Encoder(vector_merges).encode(text.encode("utf-8"))


def test_tiktoken_merges_by_concatenated_bytes_where_our_bpe_merges_by_pair():
    # The documented difference: "bc" ranks before "ab", so our BPE makes a + bc, which
    # is no merge; tiktoken sees that a + bc spells token 258 ("abc") and takes it.
    merges = Merges(((98, 99), (97, 98), (257, 99)))  # 256 = bc, 257 = ab, 258 = ab + c
    assert Encoder(merges).encode(b"abc") == [97, 256]
    assert tiktoken_encoding(merges).encode_ordinary("abc") == [258]
    assert differing_chunks(merges, "abc abc xbc") == (2, 3)  # "abc" and " abc", not " xbc"
