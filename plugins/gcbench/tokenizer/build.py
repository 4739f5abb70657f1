"""Building the native tokenizers (``gcbench-tok-go``, ``gcbench-tok-rust``) with the local toolchain.

:func:`build_local` returns the path of a binary in a cache folder named by the SHA-256
of the sources that make it (``<cache>/gcbench-tok-go-<hash16>``), so an unchanged source
is never rebuilt and a changed one never runs stale. Next to each binary,
``<binary>.json`` records how it was built (impl, source hash, toolchain version,
builder). ``go build`` / ``cargo build --release --locked --offline`` run as argv lists
(no shell), in the source folder, the Rust target folder inside the cache.

The DAG's ``build_tokenizers`` task, :func:`gcbench.tokenizer.native.tokenize_file` and
the TinyLM workload use it; the container build of the docker runner
(:func:`gcbench.factory.tokenizers.build_in_docker`) shares :class:`NativeTokenizer`
and the cache layout. It lives in the tokenizer package so that those lower layers need
not import the DAG factory.

A failed build raises :class:`gcbench.tokenizer.errors.TokenizerBuildError` carrying the
compiler's message. Only the standard library is imported (DAG parsing stays cheap).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gcbench.tokenizer.errors import TokenizerBuildError

IMPLS = ("go", "rust")
"""The native implementations."""

BUILD_TIMEOUT_S = 900.0
"""Upper bound of one compiler run (s); a cold ``cargo build --release`` takes ~15 s."""


@dataclass(frozen=True)
class NativeTokenizer:
    """How one native tokenizer is laid out and built.

    Attributes:
        impl: ``go`` or ``rust``.
        source_dir: its folder (``native/go`` or ``native/rust``).
        binary_name: ``gcbench-tok-go`` or ``gcbench-tok-rust``.
        dockerfile: images/tokenizer-<impl>.Dockerfile.
    """

    impl: str
    source_dir: Path
    binary_name: str
    dockerfile: Path

    @property
    def toolchain(self) -> str:
        """The compiler driver the build needs on PATH (``go`` or ``cargo``)."""
        return "go" if self.impl == "go" else "cargo"

    def source_files(self) -> list[Path]:
        """The files that determine the binary, sorted (tests excluded).

        Raises:
            TokenizerBuildError: the source folder is missing or empty.
        """
        root = self.source_dir
        if self.impl == "go":
            files = [root / "go.mod", *(p for p in root.glob("*.go") if not p.name.endswith("_test.go"))]
        else:
            files = [root / "Cargo.toml", root / "Cargo.lock", *root.glob("src/**/*.rs")]
        files = sorted(p for p in files if p.is_file())
        if not any(p.suffix in (".go", ".rs") for p in files):
            raise TokenizerBuildError(
                self.impl, root, f"no {self.impl} sources here; set GCBENCH_PROJECT_ROOT to the GC-Bench checkout"
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

    def cached_binary(self, cache_dir: Path) -> Path:
        """Where the binary of the current sources lives in ``cache_dir``."""
        return Path(cache_dir) / f"{self.binary_name}-{self.source_hash()[:16]}"


def native_root() -> Path:
    """The ``native/`` folder: next to ``plugins/`` in a checkout, else under
    ``GCBENCH_PROJECT_ROOT`` (e.g. when the package is installed in site-packages)."""
    beside = Path(__file__).resolve().parents[3] / "native"
    if beside.is_dir():
        return beside
    from gcbench import config

    return config.project_root() / "native"


def tokenizer(impl: str, native_dir: Path | None = None) -> NativeTokenizer:
    """The :class:`NativeTokenizer` of ``impl``.

    Raises:
        ValueError: ``impl`` is not ``go`` or ``rust``.
    """
    if impl not in IMPLS:
        raise ValueError(f"unknown tokenizer implementation {impl!r}; expected one of {', '.join(IMPLS)}")
    native = Path(native_dir) if native_dir is not None else native_root()
    return NativeTokenizer(
        impl=impl,
        source_dir=native / impl,
        binary_name=f"gcbench-tok-{impl}",
        dockerfile=native.parent / "images" / f"tokenizer-{impl}.Dockerfile",
    )


def local_build_argv(impl: str, output: Path) -> list[str]:
    """The compiler command of a local build, run in the source folder.

    ``go build`` writes ``output`` itself; cargo writes ``<target>/release/<binary>``,
    which :func:`build_local` then moves to ``output``.
    """
    if impl == "go":
        return ["go", "build", "-trimpath", "-o", str(output), "."]
    if impl == "rust":
        return ["cargo", "build", "--release", "--locked", "--offline"]
    raise ValueError(f"unknown tokenizer implementation {impl!r}")


def _toolchain_version(impl: str, tool: str) -> str:
    try:
        out = subprocess.run(
            [tool, "version" if impl == "go" else "--version"], capture_output=True, text=True, timeout=30
        )
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_provenance(binary: Path, tok: NativeTokenizer, source_hash: str, builder: str, toolchain: str) -> None:
    """Write ``<binary>.json``: impl, binary name, source hash, toolchain, builder, UTC build time."""
    info = {
        "impl": tok.impl,
        "binary": binary.name,
        "source_hash": source_hash,
        "toolchain": toolchain,
        "builder": builder,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    binary.with_name(binary.name + ".json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def is_built(path: Path) -> bool:
    """Whether ``path`` is an executable file (a cached binary ready to run)."""
    return path.is_file() and os.access(path, os.X_OK)


def _compiler_failure(tok: NativeTokenizer, what: str, code: int | None, output: str) -> TokenizerBuildError:
    lines = output.strip().splitlines()
    shown = "\n".join(lines[-40:]) if lines else "(no output)"
    status = f"exit status {code}" if code is not None else "timed out"
    return TokenizerBuildError(tok.impl, tok.source_dir, f"{what} failed ({status}):\n{shown}", output=output)


def build_local(
    impl: str, cache_dir: Path, *, native_dir: Path | None = None, timeout_s: float = BUILD_TIMEOUT_S
) -> Path:
    """Build ``gcbench-tok-<impl>`` with the local toolchain, or reuse the cached binary.

    Args:
        impl: ``go`` or ``rust``.
        cache_dir: binaries cache (created if missing), e.g. ``config.home() / "tools"``.
        native_dir: the ``native/`` folder; default :func:`native_root`.
        timeout_s: limit of the compiler run (s).

    Returns:
        The executable, ``<cache_dir>/gcbench-tok-<impl>-<source hash[:16]>``.

    Raises:
        TokenizerBuildError: toolchain missing (with the package to install), compiler
            error (its output in the message and in ``.output``), or timeout.
        ValueError: unknown ``impl``.
    """
    tok = tokenizer(impl, native_dir)
    source_hash = tok.source_hash()
    target = Path(cache_dir) / f"{tok.binary_name}-{source_hash[:16]}"
    if is_built(target):
        return target
    tool = shutil.which(tok.toolchain)
    if tool is None:
        hint = "apt-get install golang-go" if impl == "go" else "apt-get install cargo, or rustup"
        raise TokenizerBuildError(impl, tok.source_dir, f"'{tok.toolchain}' is not on PATH; install it ({hint})")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.build{os.getpid()}")
    env = dict(os.environ)
    if impl == "go":
        env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "0"})
        produced = staging
    else:
        cargo_target = Path(cache_dir) / "cargo-target"
        env["CARGO_TARGET_DIR"] = str(cargo_target)
        produced = cargo_target / "release" / tok.binary_name
    argv = local_build_argv(impl, staging)
    try:
        proc = subprocess.run(argv, cwd=tok.source_dir, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        raise _compiler_failure(
            tok, " ".join(argv[:3]), None, out.decode(errors="replace") if isinstance(out, bytes) else out
        ) from None
    if proc.returncode != 0:
        raise _compiler_failure(tok, " ".join(argv[:3]), proc.returncode, proc.stdout + proc.stderr)
    if not produced.is_file():
        raise TokenizerBuildError(impl, tok.source_dir, f"build reported success but {produced} does not exist")
    if produced != staging:
        shutil.copy2(produced, staging)
    os.chmod(staging, 0o755)
    os.replace(staging, target)  # atomic: a concurrent build of the same hash is harmless
    write_provenance(target, tok, source_hash, "local", _toolchain_version(impl, tool))
    return target
