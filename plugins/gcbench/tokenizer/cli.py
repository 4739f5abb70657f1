"""Command lines of the tokenizer: ``gcbench tokenizer ...`` and ``gcbench tokenize``.

    gcbench tokenizer corpus OUT                      # write the default corpus
    gcbench tokenizer train CORPUS --vocab-size N --out MERGES
    gcbench tokenize --impl python|go|rust --merges M --in CORPUS --out TOKENS

Errors are :mod:`gcbench.tokenizer.errors` exceptions; ``gcbench.cli.main`` prints them
as one line and exits with their code (3 merges missing, 4 merges corrupt, 5 corpus
unreadable, 6 output unwritable, 7 token file, 8 build).
"""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path

import typer

tokenizer_app = typer.Typer(no_args_is_help=True, help="Train and inspect the byte-level BPE tokenizer.")


class Impl(str, Enum):
    """Tokenizer implementations."""

    python = "python"
    go = "go"
    rust = "rust"


@tokenizer_app.command("train")
def train_command(
    corpus: Path = typer.Argument(..., help="Training text (any bytes)."),
    vocab_size: int = typer.Option(..., "--vocab-size", min=256, help="Number of ids (256 bytes + merges)."),
    out: Path = typer.Option(..., "--out", help="Merges file to write (gcbench-bpe-merges v1)."),
) -> None:
    """Learn BPE merges from CORPUS and write them to a merges file."""
    from gcbench.tokenizer.bpe import read_corpus, train

    data = read_corpus(corpus)
    started = time.perf_counter()
    merges = train(data, vocab_size)
    merges.save(out)
    typer.echo(f"{out}: {len(merges.pairs)} merges, vocab {merges.vocab_size}, sha256 {merges.sha256} "
               f"({len(data)} bytes in {time.perf_counter() - started:.2f} s)")


@tokenizer_app.command("corpus")
def corpus_command(out: Path = typer.Argument(..., help="File to write.")) -> None:
    """Write the default corpus (Python's pydoc_data.topics, UTF-8) to OUT."""
    from gcbench.tokenizer.bpe import atomic_write, default_corpus

    data = default_corpus()
    atomic_write(out, data)
    typer.echo(f"{out}: {len(data)} bytes")


def tokenize_command(
    impl: Impl = typer.Option(Impl.python, "--impl", help="Implementation: python (reference), go or rust."),
    merges: Path = typer.Option(..., "--merges", help="Merges file."),
    corpus: Path = typer.Option(..., "--in", help="Corpus to tokenize."),
    out: Path = typer.Option(..., "--out", help="Token file to write."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Native binaries cache [default: $GCBENCH_HOME/tools]."),
) -> None:
    """Tokenize a corpus into a token file (identical bytes for every --impl)."""
    from gcbench.tokenizer.native import tokenize_file

    run = tokenize_file(impl.value, merges, corpus, out, cache_dir=cache_dir)
    typer.echo(f"{out}: {run.tokens} tokens from {run.bytes} bytes with {impl.value} "
               f"(encode {run.encode_s:.3f} s, {run.mb_per_s:.1f} MB/s)")
