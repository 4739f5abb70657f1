"""Byte-level BPE tokenizer of GC-Bench: training, the reference encoder, file formats.

One algorithm, three implementations that give identical ids for every input: this
Python reference (also used in-process by the pure-PyTorch TinyLM path), ``gcbench-tok-go``
(native/go) and ``gcbench-tok-rust`` (native/rust). The algorithm and the merges file
format are documented in :mod:`gcbench.tokenizer.bpe`, the token file format in
:mod:`gcbench.tokenizer.tokenfile`; tests/vectors/ holds the shared test vectors.

Example::

    from gcbench.tokenizer import Encoder, default_corpus, read_tokens, train, write_tokens

    merges = train(default_corpus(), vocab_size=4096)
    merges.save("merges.txt")
    ids = Encoder(merges).encode(default_corpus())
    write_tokens("corpus.tok", ids, merges)
    tokens = read_tokens("corpus.tok", merges)   # numpy memmap, uint16

Importing this package costs only the standard library; numpy is imported when a
token file is read or written, or a chunk of 4096 bytes or more is encoded.
"""

from __future__ import annotations

from gcbench.tokenizer.bpe import (
    MERGES_VERSION,
    PRETOKEN_PATTERN,
    Encoder,
    Merges,
    default_corpus,
    pretokenize,
    read_corpus,
    train,
)
from gcbench.tokenizer.errors import (
    CorpusError,
    MergesError,
    MergesNotFoundError,
    OutputError,
    TokenFileError,
    TokenizerBuildError,
    TokenizerError,
)
from gcbench.tokenizer.tokenfile import TokenFileHeader, read_token_header, read_tokens, write_tokens

__all__ = [
    "MERGES_VERSION",
    "PRETOKEN_PATTERN",
    "CorpusError",
    "Encoder",
    "Merges",
    "MergesError",
    "MergesNotFoundError",
    "OutputError",
    "TokenFileError",
    "TokenFileHeader",
    "TokenizerBuildError",
    "TokenizerError",
    "default_corpus",
    "pretokenize",
    "read_corpus",
    "read_token_header",
    "read_tokens",
    "train",
    "write_tokens",
]
