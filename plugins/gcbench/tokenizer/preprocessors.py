"""Declared preprocessors: the one home of every preprocessing implementation.

A *preprocessor* is a program that turns a corpus into token ids outside the PyTorch
process: TinyLM's ``path: external-<name>``. Each is a declaration, never a branch in
code: its source folder, how it is built (a command run in a toolchain container by the
DAG's build task, or locally for the local runner) and how it is run (an argument list
with ``{binary}``, ``{merges}``, ``{in}``, ``{out}`` placeholders, never a shell). The two
GC-Bench ships, ``go`` (native/go) and ``rust`` (native/rust), are declared in
``native/preprocessors.yaml`` in exactly the form a plan's ``preprocessors:`` section uses
for a user's own (docs/preprocessors.md)::

    preprocessors:
      c:
        source: tokenizer-c                 # relative to the plan's folder, else the project
        sources: ["*.c", "*.h"]             # the files whose bytes make the version
        build:
          command: [cc, -O2, -std=c99, -o, "{out}", tok.c]
          image: gcbench/preprocessor-c-toolchain:1
          dockerfile: Dockerfile            # makes the image when it is missing
        run: ["{binary}", --merges, "{merges}", --in, "{in}", --out, "{out}"]
        output: ids

**Output contract.** ``output: gcbtoken``: the program writes GC-Bench's token file
(:mod:`gcbench.tokenizer.tokenfile`, GCBTOKEN v1, tied to the merges by their SHA-256),
as the Go and Rust programs do. ``output: ids``: the program writes the ids as decimal
ASCII separated by white space (one per line is customary); GC-Bench converts that file
into a token file after the program has exited, outside the measured window
(:func:`convert_ids`). Either way the ids must be those of the Python reference
(:class:`gcbench.tokenizer.Encoder`) for the same merges, id for id.

**Versions.** A declaration's version is the SHA-256 over the relative path and bytes
of its ``sources`` (:meth:`Preprocessor.source_hash`). The binary is cached as
``<tools>/gcbench-tok-<name>-<hash16>`` so an unchanged source is never rebuilt and a
changed one never runs stale; ``<binary>.json`` beside it records the build's identity
(source hash, binary SHA-256, toolchain version, builder, toolchain image id) and the
conformance result. The trial spec carries ``{name, source_sha256, run, output}``
(:meth:`Preprocessor.spec_entry`), so the version is part of the trial id: a changed
source is a new trial, never pooled with the old one (docs/preprocessors.md says why).

**Proven before measured.** After each build, :func:`check_conformance` tokenizes a
fixed corpus of odd inputs (:func:`conformance_inputs`: empty, one long byte run,
invalid UTF-8, long lines, mixed text) with merges trained from a fixed text, and
compares every id with the reference; a mismatch raises :class:`ConformanceError` with
the input, the first differing offset and both ids, and the binary is never marked
conformant, so no trial of that version runs (:func:`conformant_binary`).

Only the standard library and pydantic are imported at module level (DAG parsing
stays cheap); PyYAML when the built-in declarations are read.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gcbench.tokenizer.errors import TokenizerBuildError, TokenizerError

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,30}$"
"""A preprocessor's name: what follows ``external-`` in a TinyLM ``path``."""

PATH_PREFIX = "external-"
"""TinyLM's ``path`` values that name a declared preprocessor: ``external-<name>``."""

BUILD_TIMEOUT_S = 900.0
"""Upper bound of one build command (s); a cold ``cargo build --release`` takes ~15 s."""

RUN_PLACEHOLDERS = ("binary", "merges", "in", "out")
BUILD_PLACEHOLDERS = ("out", "work")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


class PreprocessorError(TokenizerBuildError):
    """A declaration that cannot be used (no such source folder, no source files)."""


class ConformanceError(TokenizerBuildError):
    """A built preprocessor's ids differ from the reference's.

    Attributes:
        case: the conformance input's name; offset: index of the first differing id
            (or the length of the shorter list when one is a prefix of the other);
        expected, got: the reference's id and the program's at ``offset`` (None past
            the end of a list).
    """

    def __init__(self, name: str, binary: Path, case: str, offset: int, expected: int | None, got: int | None):
        self.case, self.offset, self.expected, self.got = case, offset, expected, got
        super().__init__(
            name,
            binary,
            f"conformance check failed on input {case!r}: the first differing id is at offset {offset} "
            f"(reference {expected if expected is not None else 'ends'}, "
            f"{name} {got if got is not None else 'ends'}); no trial of this version runs",
        )


def _check_argv(argv: list[str], allowed: tuple[str, ...], what: str) -> list[str]:
    if not argv or not all(isinstance(a, str) and a for a in argv):
        raise ValueError(f"{what} must be a non-empty list of non-empty strings")
    del what  # the error's field path names it
    for arg in argv:
        for name in _PLACEHOLDER.findall(arg):
            if name not in allowed:
                raise ValueError(
                    f"unknown placeholder {{{name}}} in {arg!r}; allowed: " + ", ".join(f"{{{p}}}" for p in allowed)
                )
    return argv


class BuildDecl(BaseModel):
    """How a preprocessor is built.

    Attributes:
        command: argv run in the source folder (``{out}``: the binary to write,
            ``{work}``: a scratch folder kept between builds, e.g. a cargo target dir).
        local: argv of a local build when it differs from ``command`` (default: it).
        env: environment of the build (values may use the placeholders).
        artifact: where the command leaves the binary when it cannot write ``{out}``
            itself (e.g. ``{work}/target/release/prog``; a relative path is in the
            source folder, where the command runs); default ``{out}``.
        image: the toolchain image the DAG's build task runs ``command`` in (docker
            runner), with the sources read-only at /src and the cache at /out.
        dockerfile: the file that makes ``image`` when it is missing (relative to the
            source folder); ``context`` its build context (default: the source folder),
            ``target`` its stage (default: the last).
        toolchain: argv that prints the toolchain's version, recorded with each build.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str]
    local: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    artifact: str = "{out}"
    image: str | None = None
    dockerfile: str | None = None
    context: str | None = None
    target: str | None = None
    toolchain: list[str] | None = None

    @field_validator("command", "local")
    @classmethod
    def _argv(cls, argv: list[str] | None) -> list[str] | None:
        return None if argv is None else _check_argv(argv, BUILD_PLACEHOLDERS, "a build command")


class PreprocessorDecl(BaseModel):
    """One declared preprocessor, as written in a plan's ``preprocessors:`` section.

    Attributes:
        source: its source folder, relative to the plan file's folder (else to the
            project root) or absolute.
        sources: glob patterns (relative to ``source``; ``**`` for sub-folders) of the
            files whose bytes make the version; default every file but build outputs.
        exclude: patterns left out of ``sources`` (e.g. ``*_test.go``).
        build: how it is built (:class:`BuildDecl`).
        run: argv of one run: ``{binary}``, ``{merges}``, ``{in}``, ``{out}``.
        output: ``gcbtoken`` (GC-Bench's token file) or ``ids`` (decimal ids; converted
            after the run, outside the window).
        description: one line for the report.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    sources: list[str] = Field(default_factory=lambda: ["**/*"])
    exclude: list[str] = Field(default_factory=list)
    build: BuildDecl
    run: list[str] = Field(
        default_factory=lambda: ["{binary}", "--merges", "{merges}", "--in", "{in}", "--out", "{out}"]
    )
    output: Literal["gcbtoken", "ids"] = "gcbtoken"
    description: str = ""

    @field_validator("run")
    @classmethod
    def _run(cls, argv: list[str]) -> list[str]:
        _check_argv(argv, RUN_PLACEHOLDERS, "run")
        text = " ".join(argv)
        for needed in ("{binary}", "{in}", "{out}"):
            if needed not in text:
                raise ValueError(f"run must use {needed}")
        return argv


_BUILD_OUTPUTS = ("target", ".git", "__pycache__", "node_modules")


@dataclass(frozen=True)
class Preprocessor:
    """A declaration resolved on this machine: its name and absolute folders.

    Attributes:
        name: the declared name (``path: external-<name>``).
        decl: the declaration.
        source_dir: the source folder (absolute).
        origin: where it was declared (``native/preprocessors.yaml`` or the plan file).
        builtin: shipped with GC-Bench (declared in ``native/preprocessors.yaml``).
    """

    name: str
    decl: PreprocessorDecl
    source_dir: Path
    origin: str
    builtin: bool = False
    _hash: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def binary_name(self) -> str:
        """``gcbench-tok-<name>``."""
        return f"gcbench-tok-{self.name}"

    def source_files(self) -> list[Path]:
        """The files that make the version, sorted.

        Raises:
            PreprocessorError: the source folder is missing or no file matches.
        """
        root = self.source_dir
        if not root.is_dir():
            raise PreprocessorError(self.name, root, f"source folder does not exist (declared in {self.origin})")
        found: set[Path] = set()
        for pattern in self.decl.sources:
            found.update(root.glob(pattern))
        files = []
        for path in sorted(found):
            rel = path.relative_to(root).as_posix()
            if not path.is_file() or any(part in _BUILD_OUTPUTS for part in Path(rel).parts[:-1]):
                continue
            if not _matches(rel, self.decl.exclude):
                files.append(path)
        if not files:
            raise PreprocessorError(
                self.name, root, f"no file matches sources {self.decl.sources} (declared in {self.origin})"
            )
        return files

    def source_hash(self) -> str:
        """SHA-256 (hex) over the relative path and bytes of every source file."""
        digest = hashlib.sha256()
        for path in self.source_files():
            rel = path.relative_to(self.source_dir).as_posix().encode()
            data = path.read_bytes()
            digest.update(b"%d:%s%d:" % (len(rel), rel, len(data)))
            digest.update(data)
        return digest.hexdigest()

    def cached_binary(self, cache_dir: Path, source_hash: str | None = None) -> Path:
        """Where the binary of the current (or the given) sources lives in ``cache_dir``."""
        return Path(cache_dir) / f"{self.binary_name}-{(source_hash or self.source_hash())[:16]}"

    def spec_entry(self) -> dict[str, Any]:
        """What a trial spec carries: ``{name, source_sha256, run, output}`` (hashed into the id)."""
        return {
            "name": self.name,
            "source_sha256": self.source_hash(),
            "run": list(self.decl.run),
            "output": self.decl.output,
        }

    def toolchain_image(self) -> str:
        """The toolchain image of a container build: ``build.image``, else
        ``gcbench/preprocessor-<name>-toolchain:1``."""
        return self.decl.build.image or f"gcbench/preprocessor-{self.name}-toolchain:1"

    def dockerfile(self) -> Path | None:
        """The declared Dockerfile (absolute), or None."""
        return (self.source_dir / self.decl.build.dockerfile).resolve() if self.decl.build.dockerfile else None


def _matches(rel: str, patterns: list[str]) -> bool:
    """Whether a relative path matches an exclude pattern (by its name or its whole path)."""
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(rel, p) for p in patterns)


# ----------------------------------------------------------------------------------
# Declarations: the built-in file and a plan's section
# ----------------------------------------------------------------------------------


def native_root() -> Path:
    """The ``native/`` folder: next to ``plugins/`` in a checkout, else under
    ``GCBENCH_PROJECT_ROOT`` (e.g. when the package is installed in site-packages)."""
    beside = Path(__file__).resolve().parents[3] / "native"
    if beside.is_dir():
        return beside
    from gcbench import config

    return config.project_root() / "native"


BUILTIN_FILE = "preprocessors.yaml"
"""The built-in declarations, in ``native/``."""


@functools.cache
def _builtin_decls(native: str) -> dict[str, PreprocessorDecl]:
    import yaml

    path = Path(native) / BUILTIN_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise PreprocessorError("builtin", path, f"cannot read the built-in declarations: {exc.strerror}") from None
    return {name: PreprocessorDecl.model_validate(d) for name, d in data.items()}


def builtin(native_dir: Path | None = None) -> dict[str, Preprocessor]:
    """The preprocessors GC-Bench ships (``native/preprocessors.yaml``), by name."""
    native = Path(native_dir) if native_dir is not None else native_root()
    return {
        name: Preprocessor(name, decl, (native / decl.source).resolve(), f"{native / BUILTIN_FILE}", builtin=True)
        for name, decl in _builtin_decls(str(native)).items()
    }


def resolve_source(source: str, plan_dir: Path | None) -> Path:
    """A declared ``source`` folder: absolute as given, else relative to the plan's folder
    when it exists there, else to the project root (:func:`gcbench.config.project_root`)."""
    path = Path(source)
    if path.is_absolute():
        return path
    if plan_dir is not None and (plan_dir / path).is_dir():
        return (plan_dir / path).resolve()
    from gcbench import config

    return (config.project_root() / path).resolve()


def declared(
    decls: Mapping[str, PreprocessorDecl] | None = None,
    plan_dir: Path | None = None,
    origin: str = "<plan>",
    native_dir: Path | None = None,
) -> dict[str, Preprocessor]:
    """The built-in preprocessors and a plan's own, by name.

    Raises:
        ValueError: a plan declares a name a built-in already has.
    """
    out = builtin(native_dir)
    for name, decl in (decls or {}).items():
        if name in out:
            raise ValueError(f"preprocessor {name!r} is already declared by GC-Bench ({out[name].origin})")
        out[name] = Preprocessor(name, decl, resolve_source(decl.source, plan_dir), origin)
    return out


def preprocessor_of_path(path: Any) -> str | None:
    """The preprocessor a TinyLM ``path`` value names (``external-c`` -> ``c``), or None."""
    if isinstance(path, str) and path.startswith(PATH_PREFIX):
        return path[len(PATH_PREFIX) :]
    return None


# ----------------------------------------------------------------------------------
# Building
# ----------------------------------------------------------------------------------


def fill_placeholders(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{name}`` replaced by ``values[name]`` (the declaration's
    validators have refused any other name)."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def _fill(argv: list[str], values: Mapping[str, str]) -> list[str]:
    return [fill_placeholders(a, values) for a in argv]


def sha256_of(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _toolchain_version(pre: Preprocessor, env: Mapping[str, str] | None = None) -> str:
    argv = pre.decl.build.toolchain
    if not argv:
        return "not declared"
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=dict(env) if env else None)
        return (out.stdout.strip() or out.stderr.strip()).splitlines()[0] if (out.stdout or out.stderr) else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance_path(binary: Path) -> Path:
    """``<binary>.json``: the build's identity and its conformance result."""
    return binary.with_name(binary.name + ".json")


def read_provenance(binary: Path) -> dict[str, Any]:
    """The build record beside ``binary`` ({} when there is none or it is unreadable)."""
    try:
        data = json.loads(provenance_path(binary).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_provenance(binary: Path, pre: Preprocessor, source_hash: str, builder: str, toolchain: str, **extra) -> None:
    """Write ``<binary>.json``: name, source hash, binary hash, toolchain, builder, UTC time."""
    info = {
        "name": pre.name,
        "binary": binary.name,
        "source_sha256": source_hash,
        "binary_sha256": sha256_of(binary),
        "toolchain": toolchain,
        "builder": builder,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **extra,
    }
    tmp = provenance_path(binary).with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, provenance_path(binary))


def is_built(path: Path) -> bool:
    """Whether ``path`` is an executable file (a cached binary ready to run)."""
    return path.is_file() and os.access(path, os.X_OK)


def _failure(pre: Preprocessor, what: str, code: int | None, output: str) -> TokenizerBuildError:
    lines = output.strip().splitlines()
    shown = "\n".join(lines[-40:]) if lines else "(no output)"
    status = f"exit status {code}" if code is not None else "timed out"
    return TokenizerBuildError(pre.name, pre.source_dir, f"{what} failed ({status}):\n{shown}", output=output)


def build_local(pre: Preprocessor, cache_dir: Path, *, timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """Build ``pre`` with the local toolchain, or reuse the cached binary; then check it.

    Runs ``build.local`` (else ``build.command``) as an argv list in the source folder,
    ``{out}`` a staging file in ``cache_dir`` and ``{work}`` ``<cache_dir>/work-<name>``,
    moves the artifact to :meth:`Preprocessor.cached_binary` atomically, writes its
    provenance and runs :func:`check_conformance` (once per binary).

    ``cache_dir`` may be relative (to this process's working folder): it is made
    absolute first, since the build runs in the source folder, where a relative
    ``{out}`` or ``{work}`` would name another place.

    Returns:
        The conformant executable ``<cache_dir>/gcbench-tok-<name>-<hash16>``, absolute.

    Raises:
        TokenizerBuildError: the toolchain is missing, the build failed (its output in
            the message and ``.output``) or timed out; ConformanceError: ids differ
            from the reference; PreprocessorError: no sources.
    """
    cache_dir = Path(cache_dir).resolve()
    source_hash = pre.source_hash()
    target = pre.cached_binary(cache_dir, source_hash)
    if not is_built(target):
        argv = pre.decl.build.local or pre.decl.build.command
        if shutil.which(argv[0]) is None and not Path(argv[0]).is_absolute():
            raise TokenizerBuildError(pre.name, pre.source_dir, f"{argv[0]!r} is not on PATH; install the toolchain")
        target.parent.mkdir(parents=True, exist_ok=True)
        work = cache_dir / f"work-{pre.name}"
        work.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.build{os.getpid()}")
        values = {"out": str(staging), "work": str(work)}
        env = {**os.environ, **{k: _fill([v], values)[0] for k, v in pre.decl.build.env.items()}}
        argv = _fill(argv, values)
        try:
            proc = subprocess.run(
                argv, cwd=pre.source_dir, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"") + (exc.stderr or b"")
            raise _failure(
                pre, " ".join(argv[:3]), None, out.decode(errors="replace") if isinstance(out, bytes) else out
            ) from None
        except OSError as exc:
            raise TokenizerBuildError(pre.name, pre.source_dir, f"cannot run {argv[0]!r}: {exc.strerror}") from None
        if proc.returncode != 0:
            raise _failure(pre, " ".join(argv[:3]), proc.returncode, proc.stdout + proc.stderr)
        # a relative artifact is where the command left it: in the source folder it ran in
        produced = pre.source_dir / _fill([pre.decl.build.artifact], values)[0]
        if not produced.is_file():
            raise TokenizerBuildError(pre.name, pre.source_dir, f"the build reported success but {produced} is missing")
        if produced != staging:
            shutil.copy2(produced, staging)
        os.chmod(staging, 0o755)
        os.replace(staging, target)  # atomic: a concurrent build of the same hash is harmless
        write_provenance(target, pre, source_hash, "local", _toolchain_version(pre, env))
    ensure_conformant(pre, target, cache_dir)
    return target


# ----------------------------------------------------------------------------------
# Running and the output contract
# ----------------------------------------------------------------------------------


def run_argv(run: list[str], binary: Path, merges: Path, corpus: Path, out: Path) -> list[str]:
    """The declared ``run`` argv with its placeholders filled (never a shell)."""
    return _fill(list(run), {"binary": str(binary), "merges": str(merges), "in": str(corpus), "out": str(out)})


def run_program(
    name: str, run: list[str], binary: Path, merges: Path, corpus: Path, out: Path, timeout_s: float = 3600
) -> None:
    """Run one declared preprocessor on ``corpus``, writing its output to ``out``.

    Raises:
        TokenizerError: non-zero exit (with its stderr), timeout, or it cannot start.
    """
    argv = run_argv(run, binary, merges, corpus, out)
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise TokenizerError(binary, f"{name} did not finish within {timeout_s:g} s") from None
    except OSError as exc:
        raise TokenizerError(binary, f"cannot run {name}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()[-2000:]
        raise TokenizerError(binary, f"{name} exited with status {proc.returncode}: {err}")


def read_ids(path: Path) -> list[int]:
    """The ids of an ``output: ids`` file (decimal ASCII separated by white space).

    Raises:
        TokenizerError: a word that is not a non-negative decimal integer (with its
            position).
    """
    words = Path(path).read_bytes().split()
    try:
        ids = [int(w) for w in words]
    except ValueError:
        bad = next(i for i, w in enumerate(words) if not w.isdigit())
        raise TokenizerError(path, f"id {bad} is not a decimal integer: {words[bad][:40]!r}") from None
    if any(i < 0 for i in ids):
        raise TokenizerError(path, "ids must be non-negative")
    return ids


def convert_ids(ids_path: Path, tok_path: Path, merges) -> int:
    """Turn an ``output: ids`` file into a token file (outside any window); returns the count.

    Raises:
        TokenizerError: unreadable ids, or an id outside the merges' vocabulary.
    """
    from gcbench.tokenizer.tokenfile import write_tokens

    ids = read_ids(ids_path)
    if ids and max(ids) >= merges.vocab_size:
        raise TokenizerError(ids_path, f"id {max(ids)} is outside the vocabulary of {merges.vocab_size} ids")
    return write_tokens(tok_path, ids, merges)


def tokenize(
    entry: Mapping[str, Any], binary: Path, merges_path: Path, corpus: Path, tok_path: Path, timeout_s: float = 3600
) -> Path:
    """Run a spec's preprocessor (:meth:`Preprocessor.spec_entry`) into its raw output.

    Returns the file the program wrote: ``tok_path`` for ``gcbtoken``, ``<tok_path>.ids``
    for ``ids`` (convert it with :func:`convert_ids` after the window).
    """
    raw = tok_path if entry["output"] == "gcbtoken" else tok_path.with_name(tok_path.name + ".ids")
    raw.unlink(missing_ok=True)
    run_program(entry["name"], list(entry["run"]), binary, merges_path, corpus, raw, timeout_s)
    return raw


# ----------------------------------------------------------------------------------
# Conformance
# ----------------------------------------------------------------------------------


def conformance_inputs() -> dict[str, bytes]:
    """The fixed conformance corpus, by name: the odd inputs the native tests cover."""
    from gcbench.tokenizer.bpe import default_corpus

    text = default_corpus()
    return {
        "empty": b"",
        "one long byte run": b"a" * 70_000,
        "a long run of one non-ASCII byte": b"\xff" * 20_000,
        "invalid UTF-8": b"caf\xc3 \xff\xfe na\xefve \xed\xa0\x80 \xc3\xa9t\xc3\xa9 \x80\x81\n" * 200,
        "long lines": (b"word " * 30_000) + b"\n" + (b"x" * 5_000 + b" ") * 10,
        "white space and controls": b" \t\t\n\n\r\n  \x00\x01\x0b\x0c" * 300,
        "text": text[:120_000],
    }


CONFORMANCE_VOCAB = 600
"""Vocabulary of the conformance merges (trained from :data:`CONFORMANCE_TEXT_BYTES` of the default corpus)."""
CONFORMANCE_TEXT_BYTES = 60_000


def conformance_merges(cache_dir: Path) -> Path:
    """The merges file the conformance check uses (trained once, cached in ``cache_dir``)."""
    from gcbench.tokenizer.bpe import default_corpus, train

    path = Path(cache_dir) / f"conformance-merges-{CONFORMANCE_VOCAB}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        train(default_corpus()[:CONFORMANCE_TEXT_BYTES], CONFORMANCE_VOCAB).save(path)
    return path


def first_difference(expected: list[int], got: list[int]) -> int | None:
    """Index of the first differing id (the shorter length for a prefix), or None if equal."""
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            return i
    return None if len(expected) == len(got) else min(len(expected), len(got))


def check_conformance(pre_name: str, run: list[str], output: str, binary: Path, cache_dir: Path) -> dict[str, Any]:
    """Tokenize every conformance input with ``binary`` and compare with the reference.

    Returns:
        ``{"passed": True, "inputs": n, "ids": total ids compared, "checked_at": UTC}``.

    Raises:
        ConformanceError: the first input whose ids differ (offset, both ids).
        TokenizerError: the program failed on an input.
    """
    import tempfile

    from gcbench.tokenizer.bpe import Encoder, Merges
    from gcbench.tokenizer.tokenfile import read_tokens

    merges_path = conformance_merges(cache_dir)
    merges = Merges.load(merges_path)
    total = 0
    with tempfile.TemporaryDirectory(prefix=f"gcbench-conformance-{pre_name}-") as tmp:
        for i, (case, data) in enumerate(conformance_inputs().items()):
            corpus = Path(tmp) / f"in{i}.txt"
            corpus.write_bytes(data)
            out = Path(tmp) / f"out{i}.tok"
            raw = tokenize({"name": pre_name, "run": run, "output": output}, binary, merges_path, corpus, out, 300)
            got = read_ids(raw) if output == "ids" else [int(x) for x in read_tokens(raw, merges)]
            expected = Encoder(merges).encode(data)
            at = first_difference(expected, got)
            if at is not None:
                raise ConformanceError(
                    pre_name,
                    binary,
                    case,
                    at,
                    expected[at] if at < len(expected) else None,
                    got[at] if at < len(got) else None,
                )
            total += len(expected)
    return {
        "passed": True,
        "inputs": len(conformance_inputs()),
        "ids": total,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def ensure_conformant(pre: Preprocessor, binary: Path, cache_dir: Path) -> dict[str, Any]:
    """Check ``binary`` once (the result is kept in its provenance) and return the record.

    Raises:
        ConformanceError, TokenizerError: as :func:`check_conformance`; the failure is
            recorded too, so :func:`conformant_binary` refuses the binary.
    """
    record = read_provenance(binary)
    if (record.get("conformance") or {}).get("passed") and record.get("binary_sha256") == sha256_of(binary):
        return record
    try:
        result = check_conformance(pre.name, list(pre.decl.run), pre.decl.output, binary, cache_dir)
    except TokenizerError as exc:
        record["conformance"] = {"passed": False, "error": exc.message}
        _rewrite(binary, record)
        raise
    record["conformance"] = result
    _rewrite(binary, record)
    return record


def _rewrite(binary: Path, record: dict[str, Any]) -> None:
    tmp = provenance_path(binary).with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, provenance_path(binary))


def conformant_binary(entry: Mapping[str, Any], cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The built, conformance-checked binary of a spec's preprocessor version, and its record.

    A built-in preprocessor that is not built yet is built here (a trial run outside a
    DAG); a plan's own must have been built by the DAG's build task.

    Raises:
        TokenizerBuildError: not built, or built but not (or not successfully)
            conformance-checked: no trial of that version runs.
    """
    name, source_hash = str(entry["name"]), str(entry["source_sha256"])
    binary = Path(cache_dir) / f"gcbench-tok-{name}-{source_hash[:16]}"
    if not is_built(binary):
        shipped = builtin().get(name)
        if shipped is not None and shipped.source_hash() == source_hash:
            build_local(shipped, Path(cache_dir))
        else:
            raise TokenizerBuildError(
                name,
                binary,
                f"preprocessor {name} version {source_hash[:12]} is not built; the DAG's build_tokenizers task "
                "builds it (and checks it against the reference) before any trial runs",
            )
    record = read_provenance(binary)
    conformance = record.get("conformance") or {}
    if not conformance.get("passed"):
        why = conformance.get("error") or "it has not been checked against the reference"
        raise TokenizerBuildError(
            name, binary, f"preprocessor {name} version {source_hash[:12]} is not conformant: {why}"
        )
    return binary, record


def checked_binary(entry: Mapping[str, Any], binary: Path, cache_dir: Path) -> dict[str, Any]:
    """Prove a binary given by hand (TinyLM's ``tokenizer_bin`` setting) before it is
    measured under a declared preprocessor's name: the same conformance check the DAG's
    build task runs (:func:`check_conformance`, with the declaration's ``run`` and
    ``output``), remembered per binary SHA-256 and argv in ``cache_dir/checked/`` so
    later trials of that binary do not check it again.

    Returns:
        The build record: ``{"name", "tokenizer_bin", "binary_sha256", "builder":
        "tokenizer_bin setting", "conformance": {...}}``.

    Raises:
        TokenizerBuildError: the binary is missing, failed on an input, or its ids differ
            from the reference (:class:`ConformanceError`, with the input, offset and both
            ids): no trial runs it.
    """
    import json

    name = str(entry["name"])
    binary = Path(binary)
    if not binary.is_file():
        raise TokenizerBuildError(name, binary, "no such file")
    run, output = [str(a) for a in entry["run"]], str(entry.get("output") or "gcbtoken")
    digest = sha256_of(binary)
    key = hashlib.sha256(json.dumps([digest, run, output]).encode()).hexdigest()[:24]
    memo = Path(cache_dir) / "checked" / f"{key}.json"
    record = {"name": name, "tokenizer_bin": str(binary), "binary_sha256": digest, "builder": "tokenizer_bin setting"}
    if memo.exists():
        try:
            return {**record, "conformance": json.loads(memo.read_text())}
        except ValueError:
            pass  # a torn memo: check again
    try:
        conformance = check_conformance(name, run, output, binary, Path(cache_dir))
    except TokenizerBuildError:
        raise
    except TokenizerError as exc:  # the program failed on a conformance input, or its output was refused
        raise TokenizerBuildError(name, binary, f"conformance check failed: {exc.message}") from None
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(conformance))
    os.replace(tmp, memo)
    return {**record, "conformance": conformance}
