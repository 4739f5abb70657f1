"""Token files: the ids of a tokenized corpus, memory-mappable, tied to their merges.

Written identically by the Python reference, ``gcbench-tok-go`` and ``gcbench-tok-rust``
(byte for byte for the same merges and corpus). Layout, all integers little-endian::

    offset size  field
    0      8     magic  b"GCBTOKEN"
    8      4     version        uint32 = 1
    12     4     itemsize       uint32: 2 (ids are uint16, vocab_size <= 65536)
                                        or 4 (uint32, larger vocabularies)
    16     4     vocab_size     uint32: 256 + merges of the tokenizer
    20     4     reserved       uint32 = 0
    24     8     count          uint64: number of ids
    32     32    merges_sha256  SHA-256 of the merges file (raw 32 bytes)
    64     count * itemsize     the ids

The 64-byte header keeps the ids aligned for a memory map. A reader must refuse a file
whose ``merges_sha256`` is not that of the merges it will decode with: the same ids
mean different text under other merges.

This module imports only the standard library and, inside its functions, numpy, so
the TinyLM data loader can use :func:`read_tokens` cheaply.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gcbench.tokenizer.errors import TokenFileError

if TYPE_CHECKING:
    import numpy as np

TOKEN_MAGIC = b"GCBTOKEN"
TOKEN_VERSION = 1
HEADER = struct.Struct("<8sIIIIQ32s")
"""Header layout (64 bytes): magic, version, itemsize, vocab_size, reserved, count, sha256."""
assert HEADER.size == 64


class _MergesLike(Protocol):
    @property
    def sha256(self) -> str: ...

    @property
    def vocab_size(self) -> int: ...


@dataclass(frozen=True)
class TokenFileHeader:
    """The parsed header of a token file.

    Attributes:
        itemsize: bytes per id (2 or 4).
        vocab_size: ids are below this.
        count: number of ids.
        merges_sha256: hex SHA-256 of the merges file the ids were made with.
    """

    itemsize: int
    vocab_size: int
    count: int
    merges_sha256: str

    @property
    def dtype(self) -> str:
        """numpy dtype string of the ids (``<u2`` or ``<u4``)."""
        return "<u2" if self.itemsize == 2 else "<u4"


def itemsize_for(vocab_size: int) -> int:
    """Bytes per id for a vocabulary: 2 when every id fits uint16 (<= 65536 ids), else 4."""
    return 2 if vocab_size <= 65536 else 4


def write_tokens(path: str | os.PathLike[str], ids: Any, merges: _MergesLike) -> int:
    """Write ``ids`` as a token file made with ``merges`` (atomically: temp + rename).

    Args:
        path: the token file to write.
        ids: a sequence or 1-D array of ints, each below ``merges.vocab_size``.
        merges: the :class:`gcbench.tokenizer.Merges` the ids were made with.

    Returns:
        The number of ids written.

    Raises:
        ValueError: an id is negative or not below the vocabulary size.
        OutputError: the file cannot be written.
    """
    import numpy as np

    vocab_size = merges.vocab_size
    itemsize = itemsize_for(vocab_size)
    arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= vocab_size):
        raise ValueError(f"ids must lie in [0, {vocab_size}), got [{int(arr.min())}, {int(arr.max())}]")
    header = HEADER.pack(TOKEN_MAGIC, TOKEN_VERSION, itemsize, vocab_size, 0, arr.size, bytes.fromhex(merges.sha256))
    body = arr.astype("<u2" if itemsize == 2 else "<u4").tobytes()
    from gcbench.tokenizer.bpe import atomic_write

    atomic_write(path, header, body, what="cannot write token file")
    return int(arr.size)


def read_token_header(path: str | os.PathLike[str]) -> TokenFileHeader:
    """Parse and check the header of a token file (not the merges hash).

    Raises:
        TokenFileError: unreadable, not a token file, unknown version or item size,
            or a size that does not match ``count`` (truncated or padded).
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read(HEADER.size)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise TokenFileError(path, f"cannot read token file: {exc.strerror or exc}") from None
    if len(raw) < HEADER.size:
        raise TokenFileError(path, f"not a token file: {len(raw)} bytes, shorter than the 64-byte header")
    magic, version, itemsize, vocab_size, _reserved, count, sha = HEADER.unpack(raw)
    if magic != TOKEN_MAGIC:
        raise TokenFileError(path, f"not a token file: magic {magic!r}, expected {TOKEN_MAGIC!r}")
    if version != TOKEN_VERSION:
        raise TokenFileError(path, f"unsupported token file version {version}, expected {TOKEN_VERSION}")
    if itemsize != itemsize_for(vocab_size):
        raise TokenFileError(path, f"item size {itemsize} does not fit vocab_size {vocab_size}")
    expected = HEADER.size + count * itemsize
    if size != expected:
        raise TokenFileError(
            path, f"file has {size} bytes but its header announces {count} ids ({expected} bytes); truncated?"
        )
    return TokenFileHeader(itemsize=itemsize, vocab_size=vocab_size, count=count, merges_sha256=sha.hex())


def read_tokens(path: str | os.PathLike[str], merges: _MergesLike | str) -> np.ndarray:
    """Memory-map the ids of a token file, after checking it was made with ``merges``.

    Args:
        path: the token file.
        merges: the :class:`gcbench.tokenizer.Merges` to decode with, or its SHA-256 hex.

    Returns:
        A read-only ``numpy.memmap`` of shape ``(count,)``, dtype ``<u2`` or ``<u4``
        (an empty array for a file of zero ids, which cannot be mapped).

    Raises:
        TokenFileError: the header is invalid (see :func:`read_token_header`) or the
            merges hash differs: "made with merges sha256 X, not Y".
    """
    import numpy as np

    header = read_token_header(path)
    want = merges if isinstance(merges, str) else merges.sha256
    if header.merges_sha256 != want.lower():
        raise TokenFileError(
            path,
            f"made with merges sha256 {header.merges_sha256[:16]}..., not with the given merges "
            f"(sha256 {want[:16]}...); re-tokenize the corpus with these merges",
        )
    if header.count == 0:
        return np.zeros(0, dtype=header.dtype)
    return np.memmap(path, dtype=header.dtype, mode="r", offset=HEADER.size, shape=(header.count,))


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes (used to compare token files and merges files)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
