"""The same tokenizer in Hugging Face ``tokenizers`` (the benchmark's speed anchor).

:func:`hf_tokenizer` builds a ``tokenizers.Tokenizer`` that gives the ids of
:class:`gcbench.tokenizer.Encoder` for every valid UTF-8 text (``tokenizers`` takes
``str`` only, so invalid UTF-8 cannot be compared):

* pre-tokenizer: ``Split`` with :data:`HF_PRETOKEN_REGEX`, our byte-class pattern
  written over characters (every non-ASCII character is class ``L``, like its UTF-8
  bytes), then ``ByteLevel(use_regex=False)``, which only maps bytes to GPT-2's
  printable characters;
* model: ``BPE`` whose vocabulary maps each id's bytes (in GPT-2's byte alphabet) to
  the id and whose merges are the merges file's pairs in rank order. Tokens have
  distinct bytes (a rule of the merges format), so the vocabulary is one-to-one.

Needs the ``bench`` extra (``pip install tokenizers``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcbench.tokenizer.bpe import Merges

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_S = r"\t\n\x{0B}\x{0C}\r "
_L = r"A-Za-z\x{80}-\x{10FFFF}"
_D = r"0-9"
HF_PRETOKEN_REGEX = (
    rf" ?[{_L}]+| ?[{_D}]+| ?[^{_S}{_L}{_D}]+|[{_S}]+(?= [^{_S}])|[{_S}]+"
)
""":data:`gcbench.tokenizer.bpe.PRETOKEN_PATTERN` in Oniguruma syntax, over characters."""


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


def hf_tokenizer(merges: Merges) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` equivalent to ``Encoder(merges)`` on valid UTF-8.

    Raises:
        ImportError: ``tokenizers`` is not installed (``pip install -e .[bench]``).
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    table = bytes_to_unicode()
    names = ["".join(table[b] for b in token) for token in merges.token_bytes]
    vocab = {name: i for i, name in enumerate(names)}
    pairs = [(names[left], names[right]) for left, right in merges.pairs]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(HF_PRETOKEN_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return tokenizer
