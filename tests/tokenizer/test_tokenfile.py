"""gcbench.tokenizer.tokenfile: the token file format and its memory-mapped reader."""

from __future__ import annotations

import numpy as np
import pytest

from gcbench.tokenizer import Merges, TokenFileError, read_token_header, read_tokens, write_tokens
from gcbench.tokenizer.tokenfile import HEADER


def all_byte_pair_merges() -> Merges:
    """65536 merges (every pair of two bytes): vocab 65792, so ids need uint32."""
    return Merges(tuple((left, right) for left in range(256) for right in range(256)))


def test_token_file_layout_is_the_documented_header_then_little_endian_uint16(tmp_path, vector_merges, vectors):
    path = tmp_path / "t.tok"
    assert write_tokens(path, [1, 2047], vector_merges) == 2
    expected = (
        b"GCBTOKEN"
        + (1).to_bytes(4, "little")
        + (2).to_bytes(4, "little")
        + (2048).to_bytes(4, "little")
        + bytes(4)
        + (2).to_bytes(8, "little")
        + bytes.fromhex(vectors.merges_sha256)
        + b"\x01\x00\xff\x07"
    )
    assert path.read_bytes() == expected


def test_vocabulary_above_65536_ids_is_stored_as_uint32(tmp_path):
    merges = all_byte_pair_merges()
    path = tmp_path / "t.tok"
    write_tokens(path, [256 + 97 * 256 + 98, 99, 65791], merges)
    header = read_token_header(path)
    assert (header.itemsize, header.vocab_size, header.count) == (4, 65792, 3)
    tokens = read_tokens(path, merges)
    assert tokens.dtype == np.dtype("<u4")
    assert tokens.tolist() == [25186, 99, 65791]


def test_reader_memory_maps_the_ids_read_only(tmp_path, vector_merges):
    path = tmp_path / "t.tok"
    write_tokens(path, np.arange(2048), vector_merges)
    tokens = read_tokens(path, vector_merges)
    assert isinstance(tokens, np.memmap)
    assert tokens.shape == (2048,) and tokens.dtype == np.dtype("<u2")
    assert int(tokens[2047]) == 2047
    with pytest.raises(ValueError):
        tokens[0] = 5


def test_reader_accepts_the_merges_sha256_as_hex(tmp_path, vector_merges):
    path = tmp_path / "t.tok"
    write_tokens(path, [5, 6], vector_merges)
    assert read_tokens(path, vector_merges.sha256.upper()).tolist() == [5, 6]


def test_empty_token_file_reads_as_an_empty_array(tmp_path, vector_merges):
    path = tmp_path / "t.tok"
    write_tokens(path, [], vector_merges)
    assert path.stat().st_size == HEADER.size
    assert read_tokens(path, vector_merges).shape == (0,)


def test_reader_refuses_ids_made_with_other_merges(tmp_path, vector_merges):
    path = tmp_path / "t.tok"
    write_tokens(path, [1, 2, 3], vector_merges)
    other = Merges(((97, 98),))
    with pytest.raises(
        TokenFileError, match="made with merges sha256 91b7b1b3a625da29.*not with the given merges"
    ) as info:
        read_tokens(path, other)
    assert info.value.exit_code == 7


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda b: b"NOTTOKEN" + b[8:], "not a token file: magic"),
        (lambda b: b[:8] + (2).to_bytes(4, "little") + b[12:], "unsupported token file version 2"),
        (lambda b: b[:12] + (4).to_bytes(4, "little") + b[16:], "item size 4 does not fit vocab_size 2048"),
        (lambda b: b[:-1], "truncated"),
        (lambda b: b[:30], "shorter than the 64-byte header"),
    ],
)
def test_reader_refuses_a_malformed_token_file(tmp_path, vector_merges, mutate, fragment):
    path = tmp_path / "t.tok"
    write_tokens(path, [1, 2, 3], vector_merges)
    path.write_bytes(mutate(path.read_bytes()))
    with pytest.raises(TokenFileError, match=fragment):
        read_tokens(path, vector_merges)


def test_writer_refuses_ids_outside_the_vocabulary(tmp_path, vector_merges):
    with pytest.raises(ValueError, match=r"\[0, 2048\)"):
        write_tokens(tmp_path / "t.tok", [0, 2048], vector_merges)
