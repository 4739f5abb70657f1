"""gcbench.tokenizer.hf: Hugging Face tokenizers with our merges gives our ids."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.tokenizer import Encoder, default_corpus

pytest.importorskip("tokenizers")

from gcbench.tokenizer.hf import hf_tokenizer  # noqa: E402


@pytest.fixture(scope="module", params=["normalizer", "pre_tokenizer"])
def hf(vector_merges, request):
    return hf_tokenizer(vector_merges, layout=request.param)


def test_hugging_face_gives_the_reference_ids_on_every_valid_utf8_vector(hf, vector_merges, vectors):
    checked = 0
    for name, data, ids in vectors.cases:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # tokenizers takes str only
        assert hf.encode(text).ids == ids, name
        checked += 1
    assert checked >= 18


def test_hugging_face_gives_the_reference_ids_on_the_real_corpus(hf, vector_merges):
    corpus = default_corpus()
    reference = Encoder(vector_merges).encode(corpus)
    assert hf.encode(corpus.decode("utf-8")).ids == reference
    if hasattr(hf, "encode_batch_fast"):  # tokenizers >= 0.21, the benchmark's call
        assert hf.encode_batch_fast([corpus.decode("utf-8")])[0].ids == reference


def test_unknown_hugging_face_layout_is_refused(vector_merges):
    with pytest.raises(ValueError, match="layout"):
        hf_tokenizer(vector_merges, layout="model")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_hugging_face_agrees_on_arbitrary_unicode_text(hf, vector_merges, text):
    data = text.encode("utf-8", errors="surrogatepass")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return  # lone surrogates are not valid UTF-8
    assert hf.encode(text).ids == Encoder(vector_merges).encode(data)
