"""The same tokenizer in Hugging Face ``tokenizers`` (a speed anchor of the benchmark).

:func:`hf_tokenizer` builds a ``tokenizers.Tokenizer`` that gives the ids of
:class:`gcbench.tokenizer.Encoder` for every valid UTF-8 text (``tokenizers`` takes
``str`` only, so invalid UTF-8 cannot be compared). Two layouts give the same ids:

* ``"normalizer"`` (the default; the faster on the default corpus, see the benchmark): the
  ``ByteLevel`` *normalizer* maps the text's UTF-8 bytes to GPT-2's printable
  characters once, then ``Split`` with :func:`hf_byte_level_regex` (our byte classes
  written over those characters) cuts the pre-tokens;
* ``"pre_tokenizer"``: ``Split`` with :data:`HF_PRETOKEN_REGEX` (our pattern over
  characters: every non-ASCII character is class ``L``, like its UTF-8 bytes), then
  the ``ByteLevel(use_regex=False)`` *pre-tokenizer*, which only maps bytes to
  characters.

The model is ``BPE`` whose vocabulary maps each id's bytes (in GPT-2's byte alphabet)
to the id and whose merges are the merges file's pairs in rank order; HF's BPE, like
ours, merges a pair of symbols only when that pair is a merge, lowest rank first.
Tokens have distinct bytes (a rule of the merges format), so the vocabulary is
one-to-one. Its word cache holds :data:`HF_CACHE_CAPACITY` words (HF's default, 10,000,
is smaller than the distinct words of a real corpus).

For speed, encode a whole text with ``encode_batch_fast([text])`` (tokenizers >= 0.21:
no offsets are computed) rather than ``encode(text)``; both give the same ids.

Needs the ``bench`` extra (``pip install -e .[bench]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from gcbench.tokenizer.bpe import Merges

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_S = r"\t\n\x{0B}\x{0C}\r "
_L = r"A-Za-z\x{80}-\x{10FFFF}"
_D = r"0-9"
HF_PRETOKEN_REGEX = rf" ?[{_L}]+| ?[{_D}]+| ?[^{_S}{_L}{_D}]+|[{_S}]+(?= [^{_S}])|[{_S}]+"
""":data:`gcbench.tokenizer.bpe.PRETOKEN_PATTERN` in Oniguruma syntax, over characters."""

HF_CACHE_CAPACITY = 1 << 20
"""Words kept in the BPE model's cache (more than any corpus here has distinct)."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, as used by ``ByteLevel``."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _byte_class(b: int) -> str:
    if b >= 0x80 or (0x41 <= b <= 0x5A) or (0x61 <= b <= 0x7A):
        return "L"
    if 0x30 <= b <= 0x39:
        return "D"
    if b in b" \t\n\x0b\x0c\r":
        return "S"
    return "P"


def _char_class(chars: list[str]) -> str:
    """An Oniguruma bracket body matching exactly ``chars`` (ranges where consecutive)."""
    points = sorted(ord(c) for c in chars)
    parts, i = [], 0
    while i < len(points):
        j = i
        while j + 1 < len(points) and points[j + 1] == points[j] + 1:
            j += 1
        parts.append(rf"\x{{{points[i]:X}}}" if i == j else rf"\x{{{points[i]:X}}}-\x{{{points[j]:X}}}")
        i = j + 1
    return "".join(parts)


def hf_byte_level_regex() -> str:
    """:data:`gcbench.tokenizer.bpe.PRETOKEN_PATTERN` over GPT-2's byte characters.

    The same alternatives, with each byte class replaced by the characters that
    ``ByteLevel`` maps its bytes to (a space becomes ``Ġ``), for a ``Split`` after the
    ``ByteLevel`` normalizer.
    """
    table = bytes_to_unicode()
    by_class: dict[str, list[str]] = {"L": [], "D": [], "S": [], "P": []}
    for b in range(256):
        by_class[_byte_class(b)].append(table[b])
    cls = {name: _char_class(chars) for name, chars in by_class.items()}
    not_s = _char_class(by_class["L"] + by_class["D"] + by_class["P"])
    sp = _char_class([table[0x20]])
    return (
        rf"{sp}?[{cls['L']}]+|{sp}?[{cls['D']}]+|{sp}?[{cls['P']}]+"
        rf"|[{cls['S']}]+(?={sp}[{not_s}])|[{cls['S']}]+"
    )


def hf_tokenizer(merges: Merges, layout: Literal["normalizer", "pre_tokenizer"] = "normalizer") -> Tokenizer:
    """A ``tokenizers.Tokenizer`` equivalent to ``Encoder(merges)`` on valid UTF-8.

    Args:
        merges: the tokenizer.
        layout: where the byte-to-character mapping happens (module doc); both give
            the reference ids.

    Raises:
        ImportError: ``tokenizers`` is not installed (``pip install -e .[bench]``).
        ValueError: an unknown ``layout``.
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    table = bytes_to_unicode()
    names = ["".join(table[b] for b in token) for token in merges.token_bytes]
    vocab = {name: i for i, name in enumerate(names)}
    pairs = [(names[left], names[right]) for left, right in merges.pairs]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, cache_capacity=HF_CACHE_CAPACITY))
    if layout == "normalizer":
        tokenizer.normalizer = normalizers.ByteLevel()
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(hf_byte_level_regex()), behavior="isolated")
    elif layout == "pre_tokenizer":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(HF_PRETOKEN_REGEX), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        raise ValueError(f"unknown layout {layout!r}; expected 'normalizer' or 'pre_tokenizer'")
    return tokenizer
