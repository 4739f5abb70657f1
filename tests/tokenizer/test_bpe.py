"""gcbench.tokenizer.bpe: pre-tokenizer, merges file, training, the reference encoder."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.tokenizer import (
    Encoder,
    Merges,
    MergesError,
    MergesNotFoundError,
    OutputError,
    default_corpus,
    pretokenize,
    train,
)
from gcbench.tokenizer.errors import TokenizerError

S = b" \t\n\x0b\x0c\r"


def _cls(b: int) -> str:
    if b >= 0x80 or chr(b).isascii() and chr(b).isalpha():
        return "L"
    if 0x30 <= b <= 0x39:
        return "D"
    if b in S:
        return "S"
    return "P"


def scan_chunks(data: bytes) -> list[bytes]:
    """The pre-tokenizer written as the Go and Rust scanners are (nextChunk)."""
    out, i, n = [], 0, len(data)
    while i < n:
        c = _cls(data[i])
        if c == "S":
            if data[i] == 0x20 and i + 1 < n and _cls(data[i + 1]) != "S":
                c2, j = _cls(data[i + 1]), i + 1
                while j < n and _cls(data[j]) == c2:
                    j += 1
            else:
                j = i
                while j < n and _cls(data[j]) == "S":
                    j += 1
                if j < n and j - i >= 2 and data[j - 1] == 0x20:
                    j -= 1
        else:
            j = i
            while j < n and _cls(data[j]) == c:
                j += 1
        out.append(data[i:j])
        i = j
    return out


def test_pretokenizer_attaches_one_space_to_the_next_word_and_keeps_whitespace_runs():
    assert pretokenize(b"a  b") == [b"a", b" ", b" b"]
    assert pretokenize(b"\t b") == [b"\t", b" b"]
    assert pretokenize(b" \tb") == [b" \t", b"b"]
    assert pretokenize(b"x   ") == [b"x", b"   "]
    assert pretokenize(b"\n\nx") == [b"\n\n", b"x"]
    assert pretokenize(b"12ab!! ?") == [b"12", b"ab", b"!!", b" ?"]
    assert pretokenize("café ok".encode()) == ["café".encode(), b" ok"]
    assert pretokenize(b"\xff\xfe abc") == [b"\xff\xfe", b" abc"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.text(alphabet=" \t\n\r\x0bab1.é", max_size=40).map(str.encode))
def test_pretokenizer_regex_equals_the_scanner_that_go_and_rust_implement(data):
    assert pretokenize(data) == scan_chunks(data)
    assert b"".join(pretokenize(data)) == data


def test_training_merges_the_most_frequent_pair_first_and_breaks_ties_by_smaller_ids():
    # "aaabdaaabac": aa x4 -> 256; then ab and (aa,a) tie at 2 -> (97,98) wins; then (aa,ab)
    merges = train(b"aaabdaaabac", 259)
    assert merges.pairs == ((97, 97), (97, 98), (256, 257))
    assert merges.token_bytes[258] == b"aaab"
    assert Encoder(merges).encode(b"aaabdaaabac") == [258, 100, 258, 97, 99]


def test_training_stops_early_when_the_corpus_has_no_pairs_left():
    merges = train(b"ab ab", 1000)
    assert merges.pairs == ((97, 98), (32, 256))  # "ab", then " ab"
    assert Encoder(merges).encode(b"ab ab") == [256, 257]


def test_training_rejects_a_vocabulary_smaller_than_the_byte_alphabet():
    with pytest.raises(TokenizerError, match="between 256"):
        train(b"abc", 100)


def test_training_on_the_default_corpus_is_deterministic_and_round_trips():
    corpus = default_corpus()
    assert len(corpus) > 400_000
    a, b = train(corpus, 1024), train(corpus, 1024)
    assert a.pairs == b.pairs and a.vocab_size == 1024
    enc = Encoder(a)
    ids = enc.encode(corpus)
    assert enc.decode(ids) == corpus
    assert len(corpus) / len(ids) > 2.5  # 1024 ids: ~2.96 bytes/token on CPython 3.11's topics


def test_encoding_applies_the_lowest_rank_pair_first_then_the_leftmost():
    merges = Merges(((97, 97), (97, 98)))  # 256 = aa, 257 = ab
    enc = Encoder(merges)
    assert enc.encode(b"aaab") == [256, 257]
    assert enc.encode(b"aaa") == [256, 97]
    assert enc.encode(b"") == []


def test_encoder_rejects_text_instead_of_bytes(vector_merges):
    with pytest.raises(TypeError, match="bytes"):
        Encoder(vector_merges).encode("text")


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=2, max_size=200) | st.text(alphabet="etaoin sh", min_size=2, max_size=200).map(str.encode))
def test_heap_merge_and_quadratic_merge_give_the_same_ids(vector_merges, data):
    enc = Encoder(vector_merges)
    assert enc._merge_heap(data) == enc._merge_short(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_decode_inverts_encode_on_any_bytes(vector_merges, data):
    enc = Encoder(vector_merges)
    assert enc.decode(enc.encode(data)) == data


def test_reference_encoder_handles_the_default_corpus_in_seconds(vector_merges):
    import time

    corpus = default_corpus()
    started = time.perf_counter()
    ids = Encoder(vector_merges).encode(corpus)
    assert time.perf_counter() - started < 5.0
    assert len(ids) < len(corpus) / 3


def test_merges_file_round_trips_byte_for_byte_and_hashes_its_bytes(tmp_path, vector_merges, vectors):
    path = vector_merges.save(tmp_path / "m.txt")
    assert path.read_bytes() == vectors.merges_path.read_bytes()
    assert Merges.load(path).sha256 == vectors.merges_sha256
    assert path.read_text().splitlines()[0] == "gcbench-bpe-merges v1 1792"


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        (b"", 1, "empty"),
        (b"gcbench-bpe-merges v1 1\n97 98", None, "newline"),
        (b"bpe-merges v1 0\n", 1, "first line"),
        (b"gcbench-bpe-merges v2 0\n", 1, "version"),
        (b"gcbench-bpe-merges v1 2\n97 98\n", None, "announces 2"),
        (b"gcbench-bpe-merges v1 1\n97 98 99\n", 2, "two ids"),
        (b"gcbench-bpe-merges v1 1\n097 98\n", 2, "leading zeros"),
        (b"gcbench-bpe-merges v1 1\n-1 98\n", 2, "decimal"),
        (b"gcbench-bpe-merges v1 1\r\n97 98\r\n", 1, "merge count"),
        (b"gcbench-bpe-merges v1 1\n256 98\n", 2, "not smaller"),
        # 97 258 = a + bc = "abc", already made by 256 99 = ab + c
        (b"gcbench-bpe-merges v1 4\n97 98\n256 99\n98 99\n97 258\n", 5, "earlier id"),
    ],
)
def test_corrupt_merges_file_is_refused_with_its_line(tmp_path, content, line, fragment):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(MergesError) as info:
        Merges.load(path)
    assert info.value.line == line
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"{path}:{line}: corrupt merges file" if line else f"{path}: corrupt merges file")
    assert info.value.exit_code == 4


def test_missing_merges_file_is_a_distinct_error(tmp_path):
    with pytest.raises(MergesNotFoundError, match=re.escape(f"{tmp_path}/nope.txt: cannot read merges file")) as info:
        Merges.load(tmp_path / "nope.txt")
    assert info.value.exit_code == 3


def test_saving_merges_into_a_missing_folder_is_an_output_error(tmp_path, vector_merges):
    with pytest.raises(OutputError, match="cannot write") as info:
        vector_merges.save(tmp_path / "no" / "m.txt")
    assert info.value.exit_code == 6


# Long chunks (issue 15): 4 MB of one repeated byte took 15-30 s when every merge was one
# interpreted heap step. The cost is counted in steps (Encoder.work), not timed.

LONG_RUN_UNITS = [b" ", b"-", b"=", b"\n", b"0", b"a", b"\xff", b"ab", b"\t ", b"+-", b"\xc3\xa9"]


@pytest.mark.parametrize("unit", LONG_RUN_UNITS, ids=repr)
def test_a_long_run_of_one_repeated_unit_costs_a_few_whole_array_passes(vector_merges, unit):
    work = {}
    for size in (1 << 17, 1 << 18):
        data = unit * (size // len(unit))
        enc = Encoder(vector_merges)
        ids = enc.encode(data)
        assert enc.decode(ids) == data
        work[size] = enc.work
    small, large = work[1 << 17], work[1 << 18]
    # No step per merge in the interpreter, whatever the length...
    assert large.interpreted_steps <= 1_000 and large.interpreted_steps <= small.interpreted_steps + 100
    # ...and as many passes at both lengths, whose total length grows like the input
    # (a run shrinks geometrically: each pass merges about every other symbol).
    assert large.vector_passes == small.vector_passes <= 12
    assert large.vector_elements <= 2.05 * small.vector_elements
    assert large.vector_elements <= 4 * (1 << 18)


@pytest.mark.parametrize("unit", LONG_RUN_UNITS, ids=repr)
def test_whole_array_passes_give_the_heap_merge_ids_on_long_runs(vector_merges, unit):
    enc = Encoder(vector_merges)
    for length in (4096, 4097, 6001):
        data = (unit * length)[:length]
        for chunk in pretokenize(data):
            if len(chunk) >= 2:
                assert enc._merge_long(chunk) == enc._merge_heap(chunk), (unit, length)


def test_whole_array_passes_give_the_heap_merge_ids_on_random_long_chunks(vector_merges):
    import random

    rnd = random.Random(15)
    enc = Encoder(vector_merges)
    alphabets = [
        b"a",
        b"ab",
        b"aab",
        b"eeet",
        b"etaoinshrdlu",
        b"-=",
        b"  \t",
        b"0123456789",
        bytes(range(0x80, 0x100)),
        b"thethe",
        b"\n\n ",
    ]
    checked = 0
    for _ in range(40):
        alphabet = rnd.choice(alphabets)
        length = rnd.choice([4096, 5000, 12_000])
        if rnd.random() < 0.5:
            data = bytes(rnd.choice(alphabet) for _ in range(length))
        else:  # periodic with a few random changes
            data = bytearray((alphabet * length)[:length])
            for _ in range(rnd.randrange(1, 20)):
                data[rnd.randrange(length)] = rnd.choice(alphabet)
            data = bytes(data)
        for chunk in pretokenize(data):
            if len(chunk) >= 2:
                assert enc._merge_long(chunk) == enc._merge_heap(chunk)
                checked += len(chunk) >= 4096
    assert checked >= 20


def test_a_long_line_of_random_letters_costs_steps_in_proportion_to_its_length(vector_merges):
    from tok_vectors import letters_lcg

    def cost(length):
        enc = Encoder(vector_merges)
        enc.encode(letters_lcg(length, 3))
        w = enc.work
        return w.interpreted_steps + w.vector_elements / 256

    small, large = cost(1 << 16), cost(1 << 17)
    assert large <= 2.2 * small
    assert large <= 2 * (1 << 17)
