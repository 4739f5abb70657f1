"""Running the native tokenizers (``gcbench-tok-go``, ``gcbench-tok-rust``) from Python.

:func:`run_native` runs a built binary (see :mod:`gcbench.tokenizer.preprocessors` for the
build) as an argv list and turns its exit code and message into the same exception the
Python reference raises for that fault (the codes are listed in
:mod:`gcbench.tokenizer.errors`), with the same text: the programs print the operating
system's reason as the C library words it ("No such file or directory"), as Python's
``OSError.strerror`` does, and bytes in merges errors as
:func:`gcbench.tokenizer.bpe.quote_bytes`. Paths travel as bytes both ways (argv and
the program's stderr, decoded with ``surrogateescape`` as Python decodes file names), so
a name that is not UTF-8 comes back as the path given.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gcbench.tokenizer.errors import CorpusError, MergesError, MergesNotFoundError, OutputError, TokenizerError


@dataclass(frozen=True)
class NativeRun:
    """One run of a native tokenizer.

    Attributes:
        impl: ``go`` or ``rust`` (as the binary reports it).
        bytes: corpus size (bytes).
        tokens: ids written.
        encode_s: encoding time inside the program (s), the fastest of ``repeat``
            runs, each with an empty chunk cache; excludes reading and writing files.
        wall_s: the whole process as seen from Python (s): start, read, encode
            (``repeat`` times), write, exit.
    """

    impl: str
    bytes: int
    tokens: int
    encode_s: float
    wall_s: float

    @property
    def mb_per_s(self) -> float:
        """Encoding throughput, 1e6 bytes per second of ``encode_s`` (0 for no bytes)."""
        if self.bytes == 0:
            return 0.0
        return self.bytes / 1e6 / self.encode_s if self.encode_s > 0 else float("inf")


def run_native(
    binary: str | os.PathLike[str],
    merges: str | os.PathLike[str],
    corpus: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    repeat: int = 1,
    timeout_s: float = 3600,
    env: dict[str, str] | None = None,
) -> NativeRun:
    """Tokenize ``corpus`` into the token file ``out`` with a native binary.

    Args:
        binary: path of ``gcbench-tok-go`` or ``gcbench-tok-rust``.
        merges: merges file; corpus: input bytes; out: token file to write.
        repeat: encode this many times (timing only; the file is written once).
        timeout_s: process time limit (s).
        env: extra environment variables (e.g. ``GOMAXPROCS=1``).

    Raises:
        MergesNotFoundError, MergesError, CorpusError, OutputError: the program's
            exit codes 3, 4, 5, 6, with its message.
        TokenizerError: any other failure (killed, timeout, unknown exit code).
    """
    paths = [os.fsdecode(p) for p in (binary, merges, corpus, out)]
    argv = [
        paths[0],
        "--merges",
        paths[1],
        "--in",
        paths[2],
        "--out",
        paths[3],
        "--stats",
        "--repeat",
        str(int(repeat)),
    ]
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        raise TokenizerError(binary, f"did not finish within {timeout_s:g} s") from None
    except OSError as exc:
        raise TokenizerError(binary, f"cannot run: {exc.strerror or exc}") from None
    wall_s = time.perf_counter() - started
    stdout = proc.stdout.decode("utf-8", "surrogateescape")
    if proc.returncode != 0:
        raise _native_error(proc.returncode, proc.stderr.decode("utf-8", "surrogateescape"), *paths)
    try:
        stats = json.loads(stdout.strip().splitlines()[-1])
        return NativeRun(stats["impl"], int(stats["bytes"]), int(stats["tokens"]), float(stats["encode_s"]), wall_s)
    except (IndexError, ValueError, KeyError, TypeError) as exc:
        raise TokenizerError(binary, f"unexpected output {stdout[:200]!r}: {exc}") from None


def _native_error(code: int, stderr: str, binary: str, merges: str, corpus: str, out: str) -> TokenizerError:
    # One message, "<prog>: error: <path>: <message>\n"; a path may hold newlines, so the
    # whole of stderr is the message (Go's runtime or a Rust panic may add more lines).
    text = stderr.removesuffix("\n") if stderr.strip() else f"exit status {code}"
    message = re.sub(r"^gcbench-tok-[a-z0-9_]+: error: ", "", text)
    for path in (merges, corpus, out):
        if message.startswith(path + ": "):
            message = message[len(path) + 2 :]
            break
    if code == 3:
        return MergesNotFoundError(merges, message.removeprefix("cannot read merges file: "))
    if code == 4:
        m = re.match(r"(?:line (\d+): )?corrupt merges file: (.*)", message)
        if m:
            return MergesError(merges, m.group(2), line=int(m.group(1)) if m.group(1) else None)
        return MergesError(merges, message)
    if code == 5:
        return CorpusError(corpus, message)
    if code == 6:
        return OutputError(out, message)
    where = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    return TokenizerError(binary, f"failed ({where}): {text}")


def tokenize_file(
    impl: str,
    merges: str | os.PathLike[str],
    corpus: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> NativeRun:
    """Tokenize a corpus file with ``impl`` (``python`` or a built-in preprocessor's name)
    into ``out``.

    A built-in preprocessor (``native/preprocessors.yaml``: ``go``, ``rust``) is built (or
    reused) and checked against the reference with
    :func:`gcbench.tokenizer.preprocessors.build_local` in ``cache_dir`` (default
    ``<GCBENCH_HOME>/tools``, as the DAG). All write byte-identical files.

    Raises:
        The errors of :func:`run_native`, of the build (TokenizerBuildError), and for
        ``python`` those of :meth:`Merges.load`, :func:`read_corpus` and
        :func:`write_tokens`; ValueError for an unknown ``impl``.
    """
    if impl == "python":
        from gcbench.tokenizer.bpe import Encoder, Merges, read_corpus
        from gcbench.tokenizer.tokenfile import write_tokens

        started = time.perf_counter()
        m = Merges.load(merges)
        data = read_corpus(corpus)
        t0 = time.perf_counter()
        try:
            ids = Encoder(m).encode(data)
        except MemoryError:
            raise TokenizerError(corpus, f"out of memory encoding {len(data)} bytes") from None
        encode_s = time.perf_counter() - t0
        count = write_tokens(out, ids, m)
        return NativeRun("python", len(data), count, encode_s, time.perf_counter() - started)
    from gcbench.tokenizer.preprocessors import build_local, builtin

    shipped = builtin()
    if impl not in shipped:
        raise ValueError(f"unknown tokenizer implementation {impl!r}; expected one of python, {', '.join(shipped)}")
    if cache_dir is None:
        from gcbench import config

        cache_dir = config.home() / "tools"
    binary = build_local(shipped[impl], Path(cache_dir))
    return run_native(binary, merges, corpus, out)
