"""Reading tests/vectors/ (format: tests/vectors/make_vectors.py), shared by the
tokenizer tests; the same reader exists in bpe_test.go and native/rust/tests/vectors.rs."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors"


@dataclass(frozen=True)
class Vectors:
    """tests/vectors/cases.txt, parsed (format: tests/vectors/make_vectors.py)."""

    merges_path: Path
    merges_sha256: str
    cases: list[tuple[str, bytes, list[int]]]
    generated: list[tuple[str, str, int, int, int, str]]


def load_vectors() -> Vectors:
    merges_path, sha, cases, generated = None, None, [], []
    for line in (VECTORS / "cases.txt").read_text(encoding="ascii").splitlines():
        if not line or line.startswith("#"):
            continue
        f = line.split(" ")
        if f[0] == "merges":
            merges_path, sha = VECTORS / f[1], f[2]
        elif f[0] == "case":
            data = b"" if f[2] == "-" else bytes.fromhex(f[2])
            ids = [] if f[3] == "-" else [int(x) for x in f[3].split(",")]
            cases.append((f[1], data, ids))
        elif f[0] == "gen":
            generated.append((f[1], f[2], int(f[3]), int(f[4]), int(f[5]), f[6]))
        else:
            raise ValueError(f"unknown record {f[0]!r} in cases.txt")
    return Vectors(merges_path, sha, cases, generated)


def letters_lcg(length: int, seed: int) -> bytes:
    """The ``letters-lcg`` generator (same in bpe_test.go and tests/vectors.rs)."""
    out = bytearray(length)
    x = seed & 0xFFFFFFFF
    for i in range(length):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = 97 + (x >> 16) % 26
    return bytes(out)


def ids_sha256(ids) -> str:
    return hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()
