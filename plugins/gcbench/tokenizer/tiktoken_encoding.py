"""The same tokenizer as a ``tiktoken.Encoding`` (the fastest anchor of the benchmark).

:func:`tiktoken_encoding` builds ``tiktoken.Encoding(name, pat_str, mergeable_ranks,
special_tokens={})`` from a merges file:

* ``mergeable_ranks`` maps the bytes of every id to the id: bytes 0..255 rank 0..255,
  merge ``k`` rank ``256 + k``, so tiktoken's tokens are our ids;
* ``pat_str`` is :data:`TIKTOKEN_PAT_STR`, :data:`gcbench.tokenizer.bpe.PRETOKEN_PATTERN`
  written over characters for tiktoken's regex engine (``fancy-regex``): every
  non-ASCII character is class ``L``, as each of its UTF-8 bytes is. tiktoken takes
  ``str`` only, so invalid UTF-8 cannot be compared.

**Where tiktoken can differ.** tiktoken merges two adjacent parts whenever their
*concatenated bytes* are a token (lowest rank first), and takes a whole pre-token at
once when its bytes are a token; our BPE (and Hugging Face's) merges two symbols only
when *that pair* is a merge. They give different ids when encoding reaches a token's
bytes by another split than its merge: with merges ``b c`` (256), ``a b`` (257),
``257 c`` (258), ``"abc"`` is ``[97, 256]`` for us (``b c`` ranks first; ``a`` + ``bc``
is no merge) but ``[258]`` for tiktoken. Merges learned by :func:`gcbench.tokenizer.train`
do not produce such splits on the inputs we checked (the default corpus, every vector,
random text, runs of one byte; tests/tokenizer/test_tiktoken_encoding.py), and the
benchmark compares the ids of every run; :func:`differing_chunks` counts the pre-tokens
of a text on which the two disagree.

**Where tiktoken fails.** The whitespace rule needs a lookahead (a run of whitespace
gives its last space to the word after it), which fancy-regex runs by backtracking,
one stack entry per character: a whitespace run of more than about 1,000,000
characters followed by other text makes ``encode_ordinary`` raise ``PanicException``
(fancy-regex ``StackOverflow``). Our encoders, and ``tokenizers``, have no such limit.

Needs the ``bench`` extra (``pip install -e .[bench]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcbench.tokenizer.bpe import PRETOKEN_PATTERN, Encoder, Merges

if TYPE_CHECKING:
    import tiktoken

_S = r"\t\n\x0b\x0c\r "
_L = r"A-Za-z\x{80}-\x{10FFFF}"
_D = r"0-9"
TIKTOKEN_PAT_STR = rf" ?[{_L}]+| ?[{_D}]+| ?[^{_S}{_L}{_D}]+|[{_S}]+$|[{_S}]+(?= [^{_S}])|[{_S}]+"
""":data:`gcbench.tokenizer.bpe.PRETOKEN_PATTERN` in fancy-regex syntax, over characters.

The extra alternative ``[S]+$`` (a whitespace run that ends the text) matches nothing
the next two would not; it is there because it needs no backtracking, so a long run at
the end of a text does not reach fancy-regex's stack limit (module doc)."""


def tiktoken_encoding(merges: Merges, name: str = "gcbench-bpe") -> tiktoken.Encoding:
    """A ``tiktoken.Encoding`` with our ids and pre-tokenizer (module doc for its limits).

    Raises:
        ImportError: ``tiktoken`` is not installed (``pip install -e .[bench]``).
    """
    import tiktoken

    ranks = {token: i for i, token in enumerate(merges.token_bytes)}
    return tiktoken.Encoding(name, pat_str=TIKTOKEN_PAT_STR, mergeable_ranks=ranks, special_tokens={})


def differing_chunks(merges: Merges, text: str, encoding: tiktoken.Encoding | None = None) -> tuple[int, int]:
    """How many distinct pre-tokens of ``text`` tiktoken encodes differently from us.

    Returns:
        ``(differing, distinct)``: distinct pre-tokens (chunks) of the text's UTF-8 bytes
        whose ids differ, and distinct pre-tokens in all.
    """
    encoding = encoding or tiktoken_encoding(merges)
    reference = Encoder(merges)
    chunks = set(PRETOKEN_PATTERN.findall(text.encode("utf-8")))
    differing = sum(
        1 for chunk in chunks if encoding.encode_ordinary(chunk.decode("utf-8")) != list(reference.encode_chunk(chunk))
    )
    return differing, len(chunks)
