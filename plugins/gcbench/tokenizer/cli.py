"""Command lines of the tokenizer: ``gcbench tokenizer ...`` and ``gcbench tokenize``.

    gcbench tokenizer corpus OUT                      # write the default corpus
    gcbench tokenizer train CORPUS --vocab-size N --out MERGES
    gcbench tokenize --impl python|go|rust --merges M --in CORPUS --out TOKENS

Errors are :mod:`gcbench.tokenizer.errors` exceptions; ``gcbench.cli.main`` prints them
as one line and exits with their code (3 merges missing, 4 merges corrupt, 5 corpus
unreadable, 6 output unwritable, 7 token file, 8 build).

File arguments are taken as given (``str``, not ``pathlib.Path``, which would turn
``"out/"`` into ``"out"`` and ``""`` into ``"."``), so every ``--impl`` opens the same
path and fails alike; any bytes the operating system allows in a name work, and
messages print a name's own bytes (as the Go and Rust programs do), whatever the
locale's encoding.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from gcbench.tokenizer.errors import TokenizerError

tokenizer_app = typer.Typer(no_args_is_help=True, help="Train and inspect the byte-level BPE tokenizer.")


def echo_raw(message: str, err: bool = False) -> None:
    """Print ``message`` with file names as their bytes (surrogateescape), never failing
    on a name that is not valid in the terminal's encoding."""
    typer.echo(message.encode("utf-8", "surrogateescape"), err=err)


def _fail(exc: TokenizerError) -> typer.Exit:
    """``error: <message>`` on stderr, as gcbench.cli prints errors, in raw bytes; the
    exit code of the error."""
    echo_raw(f"error: {exc}", err=True)
    return typer.Exit(exc.exit_code)


@tokenizer_app.command("train")
def train_command(
    corpus: str = typer.Argument(..., help="Training text (any bytes)."),
    vocab_size: int = typer.Option(..., "--vocab-size", min=256, help="Number of ids (256 bytes + merges)."),
    out: str = typer.Option(..., "--out", help="Merges file to write (gcbench-bpe-merges v1)."),
) -> None:
    """Learn BPE merges from CORPUS and write them to a merges file."""
    from gcbench.tokenizer.bpe import read_corpus, train

    try:
        data = read_corpus(corpus)
        started = time.perf_counter()
        merges = train(data, vocab_size)
        merges.save(out)
    except TokenizerError as exc:
        raise _fail(exc) from None
    echo_raw(
        f"{out}: {len(merges.pairs)} merges, vocab {merges.vocab_size}, sha256 {merges.sha256} "
        f"({len(data)} bytes in {time.perf_counter() - started:.2f} s)"
    )


@tokenizer_app.command("corpus")
def corpus_command(out: str = typer.Argument(..., help="File to write.")) -> None:
    """Write the default corpus (Python's pydoc_data.topics, UTF-8) to OUT."""
    from gcbench.tokenizer.bpe import atomic_write, default_corpus

    data = default_corpus()
    try:
        atomic_write(out, data)
    except TokenizerError as exc:
        raise _fail(exc) from None
    echo_raw(f"{out}: {len(data)} bytes")


def tokenize_command(
    impl: str = typer.Option(
        "python", "--impl", help="Implementation: python (the reference) or a built-in preprocessor (go, rust)."
    ),
    merges: str = typer.Option(..., "--merges", help="Merges file."),
    corpus: str = typer.Option(..., "--in", help="Corpus to tokenize."),
    out: str = typer.Option(..., "--out", help="Token file to write."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Native binaries cache [default: $GCBENCH_HOME/tools]."),
) -> None:
    """Tokenize a corpus into a token file (identical bytes for every --impl)."""
    from gcbench.tokenizer.native import tokenize_file

    try:
        run = tokenize_file(impl, merges, corpus, out, cache_dir=cache_dir)
    except TokenizerError as exc:
        raise _fail(exc) from None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--impl") from None
    echo_raw(
        f"{out}: {run.tokens} tokens from {run.bytes} bytes with {impl} "
        f"(encode {run.encode_s:.3f} s, {run.mb_per_s:.1f} MB/s)"
    )
