"""Errors of the tokenizers (Python reference, Go, Rust, and their builds).

All are :class:`gcbench.errors.GCBenchError`, so the ``gcbench`` CLI prints them as one
line. Their exit codes are the ones the native programs ``gcbench-tok-go`` and
``gcbench-tok-rust`` use for the same fault, so a wrapped native run and a Python run
fail alike:

====  =====================================================
code  fault
====  =====================================================
2     bad command line (native programs only)
3     merges file missing or unreadable      MergesNotFoundError
4     merges file corrupt                    MergesError
5     corpus unreadable                      CorpusError
6     output not writable                    OutputError
7     token file invalid or hash mismatch    TokenFileError
8     native tokenizer build failed          TokenizerBuildError
1     anything else (e.g. a native program killed)  TokenizerError
====  =====================================================
"""

from __future__ import annotations

from gcbench.errors import GCBenchError


class TokenizerError(GCBenchError):
    """Base class of tokenizer errors.

    Attributes:
        path: the file the error is about (merges, corpus, token file, source folder),
            or None.
    """

    exit_code = 1

    def __init__(self, path: object, message: str):
        self.path = None if path is None else str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path is not None else message)


class MergesError(TokenizerError):
    """A merges file is not a valid ``gcbench-bpe-merges v1`` file.

    Attributes:
        line: 1-based line of the fault, or None when it is about the whole file.
    """

    exit_code = 4

    def __init__(self, path: object, message: str, line: int | None = None):
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(where, f"corrupt merges file: {message}")
        self.path = str(path)


class MergesNotFoundError(MergesError):
    """A merges file does not exist or cannot be read."""

    exit_code = 3

    def __init__(self, path: object, message: str):
        TokenizerError.__init__(self, path, f"cannot read merges file: {message}")
        self.line = None


class CorpusError(TokenizerError):
    """The corpus to tokenize or to train on cannot be read."""

    exit_code = 5


class OutputError(TokenizerError):
    """An output file (merges or tokens) cannot be written."""

    exit_code = 6


class TokenFileError(TokenizerError):
    """A token file is malformed, truncated, or was made with other merges."""

    exit_code = 7


class TokenizerBuildError(TokenizerError):
    """Building a native tokenizer failed.

    Attributes:
        impl: ``go`` or ``rust``.
        output: the compiler's combined stdout and stderr.
    """

    exit_code = 8

    def __init__(self, impl: str, path: object, message: str, output: str = ""):
        self.impl = impl
        self.output = output
        super().__init__(path, message)
