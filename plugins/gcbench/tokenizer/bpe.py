"""Byte-level BPE: pre-tokenizer, merges file, training and the reference encoder.

This module is the definition of GC-Bench's tokenizer; the Go (native/go) and Rust
(native/rust) programs implement exactly the same algorithm and are checked against it
with the shared vectors in tests/vectors/.

Algorithm (version 1)
---------------------
1. **Pre-tokenization** splits the input bytes into chunks. Each byte has a class:
   ``L`` (ASCII letter or any byte >= 0x80, so UTF-8 sequences and invalid bytes stay
   with letters), ``D`` (ASCII digit), ``S`` (ASCII whitespace: space, \\t, \\n, \\v, \\f,
   \\r) or ``P`` (every other byte). Scanning from the left, a chunk is

   * a space followed by a maximal run of one non-``S`` class (the space joins the
     word after it, as in GPT-2), else
   * a maximal run of one non-``S`` class, else
   * a maximal ``S`` run, less its last byte when that byte is a space, the run is at
     least two bytes long and a non-``S`` byte follows (that space starts the next
     chunk).

   It is the regular expression :data:`PRETOKEN_PATTERN`, a byte-class version of
   GPT-2's pattern that needs no Unicode tables, so all three languages agree on
   every byte string, valid UTF-8 or not.
2. **Merging** works inside each chunk. Ids 0..255 are the bytes; merge ``k`` (0-based,
   the ``k``-th pair of the merges file) joins the adjacent pair ``(left, right)``
   into id ``256 + k``. While any adjacent pair of the chunk is a merge, the pair of
   lowest rank ``k`` is merged, at its leftmost occurrence first. (Merging every
   occurrence of that pair left to right gives the same result, as does Hugging Face
   ``tokenizers``' BPE with the same merges, see :mod:`gcbench.tokenizer.hf`.)

Merges file (``gcbench-bpe-merges v1``)
---------------------------------------
Text, ASCII, each line ended by ``\\n`` (no ``\\r``, no blank or comment line)::

    gcbench-bpe-merges v1 <count>
    <left> <right>            <- merge 0, makes id 256
    <left> <right>            <- merge 1, makes id 257
    ...                       <- <count> lines in all

``left`` and ``right`` are decimal ids (no sign, no leading zero) smaller than the
id being made, and the byte string of every made id (the bytes of ``left`` then
``right``) differs from those of all ids before it, so a token is identified by its
bytes. The vocabulary size is ``256 + count``. The file's SHA-256 identifies the
tokenizer in token files (:mod:`gcbench.tokenizer.tokenfile`).

Training
--------
:func:`train` counts the chunks of the corpus, then repeatedly merges the adjacent pair
with the highest count over all chunk occurrences (overlapping pairs such as the two
``aa`` of ``aaa`` both count), ties broken by the smaller ``(left, right)``. A pair
whose bytes already form a token is never chosen. It stops at ``vocab_size`` ids or
when no pair is left.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

from gcbench.tokenizer.errors import CorpusError, MergesError, MergesNotFoundError, OutputError, TokenizerError

if TYPE_CHECKING:  # numpy is imported where the long-run merge needs it
    import numpy as np

MERGES_MAGIC = "gcbench-bpe-merges"
"""First word of a merges file."""
MERGES_VERSION = "v1"
"""Merges format (and algorithm) version written and accepted."""

_S = rb"\t\n\x0b\x0c\r "
_L = rb"A-Za-z\x80-\xff"
_D = rb"0-9"
PRETOKEN_PATTERN = re.compile(
    rb" ?[" + _L + rb"]+"
    rb"| ?[" + _D + rb"]+"
    rb"| ?[^" + _S + _L + _D + rb"]+"
    rb"|[" + _S + rb"]+(?= [^" + _S + rb"])"
    rb"|[" + _S + rb"]+"
)
"""The pre-tokenizer as a bytes regex; ``findall`` gives the chunks (see module doc)."""

_MAX_ID = 1 << 31
"""Ids stay below 2**31 (the formats allow uint32; this bound keeps every language's
signed and unsigned integers comfortable)."""

_SHORT_CHUNK = 48
"""Chunks up to this many bytes use the quadratic merge loop, longer ones the heap."""

LONG_CHUNK = 4096
"""Chunks of at least this many bytes start with whole-array merge passes (numpy)."""
_PASS_MIN_SHARE = 256
"""A whole-array pass costs about as much as 1/256 of the chunk's length in heap steps:
passes go on while each merges at least ``length / _PASS_MIN_SHARE`` pairs, then the
heap finishes the chunk (so a pass never costs more than the heap steps it saves)."""

CACHE_MAX_CHUNK = 256
"""Chunks longer than this (bytes) are not cached; they are rare and would bloat it."""
CACHE_MAX_ENTRIES = 1 << 18
"""The chunk cache is emptied when it reaches this many entries (bounded memory)."""


def pretokenize(data: bytes) -> list[bytes]:
    """The chunks of ``data`` (module doc, step 1); ``b"".join`` of them is ``data``."""
    return PRETOKEN_PATTERN.findall(data)


@dataclass(frozen=True, eq=False)
class Merges:
    """An ordered list of BPE merges: the whole tokenizer.

    Attributes:
        pairs: ``pairs[k] = (left, right)`` makes id ``256 + k``.
        source: the file it was loaded from, or ``"<memory>"``.
    """

    pairs: tuple[tuple[int, int], ...]
    source: str = field(default="<memory>")

    def __post_init__(self) -> None:
        _validate_pairs(self.pairs, self.source)

    @property
    def vocab_size(self) -> int:
        """Number of ids: 256 byte ids plus one per merge."""
        return 256 + len(self.pairs)

    @cached_property
    def token_bytes(self) -> tuple[bytes, ...]:
        """``token_bytes[id]``: the bytes id ``id`` stands for (length vocab_size)."""
        return _token_bytes(self.pairs)

    def to_bytes(self) -> bytes:
        """The merges file content (``gcbench-bpe-merges v1``, module doc)."""
        lines = [f"{MERGES_MAGIC} {MERGES_VERSION} {len(self.pairs)}\n"]
        lines.extend(f"{left} {right}\n" for left, right in self.pairs)
        return "".join(lines).encode("ascii")

    @cached_property
    def sha256(self) -> str:
        """SHA-256 (lower-case hex) of the merges file bytes; loading is strict, so a
        loaded file re-serializes to exactly its own bytes."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the merges file to ``path`` (atomically: temp file then rename).

        Raises:
            OutputError: the file or its folder cannot be written (:func:`atomic_write`).
        """
        atomic_write(path, self.to_bytes())
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Merges:
        """Read and validate a merges file.

        Raises:
            MergesNotFoundError: it does not exist or cannot be read (exit code 3).
            MergesError: it is not a valid ``gcbench-bpe-merges v1`` file; the message
                gives the line and what is wrong (exit code 4).
        """
        try:
            data = read_file(path)
        except OSError as exc:
            raise MergesNotFoundError(path, exc.strerror or str(exc)) from None
        return cls.from_bytes(data, source=str(path))

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> Merges:
        """Parse merges file content; raises :class:`MergesError` as :meth:`load`."""
        return cls(_parse_merges(data, source), source=source)


def _parse_merges(data: bytes, source: str) -> tuple[tuple[int, int], ...]:
    if not data:
        raise MergesError(source, "file is empty", line=1)
    if not data.endswith(b"\n"):
        raise MergesError(source, "file does not end with a newline (truncated?)")
    lines = data[:-1].split(b"\n")
    header = lines[0].split(b" ")
    if len(header) != 3 or header[0] != MERGES_MAGIC.encode():
        raise MergesError(source, f"first line must be '{MERGES_MAGIC} {MERGES_VERSION} <count>'", line=1)
    if header[1] != MERGES_VERSION.encode():
        raise MergesError(
            source, f"unsupported version {quote_bytes(header[1][:20])}, expected {MERGES_VERSION}", line=1
        )
    count = _parse_id(header[2], source, 1, "merge count")
    if len(lines) - 1 != count:
        raise MergesError(source, f"header announces {count} merges but the file has {len(lines) - 1}")
    pairs = []
    for k, line in enumerate(lines[1:]):
        parts = line.split(b" ")
        if len(parts) != 2:
            raise MergesError(source, "expected two ids separated by one space", line=k + 2)
        pairs.append((_parse_id(parts[0], source, k + 2, "left id"), _parse_id(parts[1], source, k + 2, "right id")))
    return tuple(pairs)


def _parse_id(text: bytes, source: str, line: int, what: str) -> int:
    if not text or not text.isdigit() or not text.isascii() or (len(text) > 1 and text[:1] == b"0") or len(text) > 10:
        raise MergesError(
            source, f"{what} {quote_bytes(text[:20])} is not a decimal number without leading zeros", line=line
        )
    value = int(text)
    if value >= _MAX_ID:
        raise MergesError(source, f"{what} {value} is too large", line=line)
    return value


def _validate_pairs(pairs: tuple[tuple[int, int], ...], source: str) -> None:
    seen: set[bytes] = set()
    tokens = [bytes([b]) for b in range(256)]
    seen.update(tokens)
    for k, (left, right) in enumerate(pairs):
        new_id = 256 + k
        if not (0 <= left < new_id and 0 <= right < new_id):
            raise MergesError(
                source, f"merge {k} ({left} {right}) uses an id not smaller than the id it makes ({new_id})", line=k + 2
            )
        token = tokens[left] + tokens[right]
        if token in seen:
            raise MergesError(
                source,
                f"merge {k} ({left} {right}) makes bytes {quote_bytes(token[:20])} that an earlier id already has",
                line=k + 2,
            )
        seen.add(token)
        tokens.append(token)


def _token_bytes(pairs: tuple[tuple[int, int], ...]) -> tuple[bytes, ...]:
    tokens = [bytes([b]) for b in range(256)]
    for left, right in pairs:
        tokens.append(tokens[left] + tokens[right])
    return tuple(tokens)


def merge_pair(ids, left: int, right: int, new_id: int) -> list[int]:
    """``ids`` with every non-overlapping ``(left, right)`` pair, left to right, replaced by ``new_id``."""
    merged: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == left and ids[i + 1] == right:
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


def quote_bytes(data: bytes) -> str:
    """``data`` in double quotes for an error message, as the Go and Rust programs write it.

    Printable ASCII stays (``"`` and ``\\`` get a backslash), every other byte is
    ``\\xNN`` (two lower-case hex digits), so all three implementations print the same
    message for any bytes, valid UTF-8 or not.
    """
    out = ['"']
    for b in data:
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    out.append('"')
    return "".join(out)


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a file, its path taken as given (no ``pathlib`` clean-up: ``"a/"``
    is not ``"a"``, ``""`` is not ``"."``), as the Go and Rust programs open it.

    Raises:
        OSError: the operating system's error (missing, a directory, unreadable...).
    """
    with open(os.fsdecode(path), "rb") as fh:
        return fh.read()


def atomic_write(path: str | os.PathLike[str], *chunks: bytes, what: str = "cannot write") -> None:
    """Write ``chunks`` to ``path`` through a temporary file and a rename (no half files).

    The path is taken as given, split at its last ``/`` (the Go and Rust programs do the
    same): the temporary file is ``<folder>/.<name>.tmp<pid>`` and the rename replaces
    ``<folder>/<name>``. A path whose name is empty, ``.`` or ``..`` (``"out/"``) names a
    folder and is refused with "Is a directory"; the empty path does not exist ("No such
    file or directory", as ``open("")`` says).

    Raises:
        OutputError: the folder is missing or not writable, the path is a folder, or the
            disk is full (``what`` starts the message, the operating system's reason
            follows); the temporary file is removed.
    """
    target = os.fsdecode(path)
    if not target:
        raise OutputError(target, f"{what}: {os.strerror(errno.ENOENT)}")
    folder, slash, name = target.rpartition("/")
    folder += slash
    if name in ("", ".", ".."):
        raise OutputError(target, f"{what}: {os.strerror(errno.EISDIR)}")
    tmp = f"{folder}.{name}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
        os.rename(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OutputError(target, f"{what}: {exc.strerror or exc}") from None


class Encoder:
    """The reference byte-level BPE encoder (module doc, algorithm version 1).

    Encoding caches the ids of each chunk of at most :data:`CACHE_MAX_CHUNK` bytes, so
    prose (a few thousand distinct words) encodes at several MB/s in pure Python. Chunks
    of :data:`LONG_CHUNK` bytes or more (a 1 MB line without spaces, 4 MB of one
    repeated byte) are merged rank by rank over the whole array with numpy: each pass
    merges every occurrence of the lowest rank present, so a run of one byte takes a
    handful of passes of linear cost instead of one interpreted heap step per merge;
    once a pass merges fewer than ``1/256`` of the symbols, a heap (O(n log n)) takes
    over. :attr:`work` counts both kinds of step (tests bound it without timing).

    Example::

        enc = Encoder(Merges.load("merges.txt"))
        ids = enc.encode("héllo wörld".encode())
        assert enc.decode(ids) == "héllo wörld".encode()
    """

    def __init__(self, merges: Merges):
        self.merges = merges
        # pair key (left << 32 | right) -> rank; the made id is 256 + rank
        self._ranks: dict[int, int] = {(left << 32) | right: k for k, (left, right) in enumerate(merges.pairs)}
        self._cache: dict[bytes, tuple[int, ...]] = {}
        # numpy lookup tables of _merge_long, built on first use
        self._rank_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.work = MergeWork()

    @property
    def vocab_size(self) -> int:
        """Number of ids (256 + merges)."""
        return self.merges.vocab_size

    @property
    def cache_entries(self) -> int:
        """Chunks whose ids are cached now (a warmed encoder holds every chunk of its
        corpus up to :data:`CACHE_MAX_CHUNK` bytes; a miss in a measured window grows it)."""
        return len(self._cache)

    def encode(self, data: bytes) -> list[int]:
        """Token ids of ``data`` (any bytes, valid UTF-8 or not); ``[]`` for ``b""``."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"encode takes bytes, not {type(data).__name__}; use text.encode('utf-8')")
        out: list[int] = []
        extend = out.extend
        cache = self._cache
        for chunk in PRETOKEN_PATTERN.findall(bytes(data)):
            ids = cache.get(chunk)
            if ids is None:
                ids = self.encode_chunk(chunk)
                if len(chunk) <= CACHE_MAX_CHUNK:
                    if len(cache) >= CACHE_MAX_ENTRIES:
                        cache.clear()
                    cache[chunk] = ids
            extend(ids)
        return out

    def decode(self, ids: list[int]) -> bytes:
        """The bytes of ``ids`` (inverse of :meth:`encode`); IndexError for an unknown id."""
        table = self.merges.token_bytes
        return b"".join(table[i] for i in ids)

    def encode_chunk(self, chunk: bytes) -> tuple[int, ...]:
        """Ids of one pre-token chunk (no pre-tokenization applied)."""
        if len(chunk) <= 1:
            return tuple(chunk)
        if len(chunk) <= _SHORT_CHUNK:
            return self._merge_short(chunk)
        if len(chunk) < LONG_CHUNK:
            return self._merge_heap(chunk)
        return self._merge_long(chunk)

    def _merge_short(self, chunk: bytes) -> tuple[int, ...]:
        # Quadratic, but chunks are short: merge every occurrence of the lowest-rank pair.
        ranks = self._ranks
        ids = list(chunk)
        work = self.work
        while len(ids) > 1:
            work.scan_steps += len(ids) - 1
            best = None
            for i in range(len(ids) - 1):
                rank = ranks.get((ids[i] << 32) | ids[i + 1])
                if rank is not None and (best is None or rank < best):
                    best = rank
            if best is None:
                break
            left, right = self.merges.pairs[best]
            ids = merge_pair(ids, left, right, 256 + best)
        return tuple(ids)

    def _merge_heap(self, symbols) -> tuple[int, ...]:
        # ``symbols``: the chunk's bytes, or ids part-way merged by _merge_long.
        # Linked list of symbols + min-heap of rank << 40 | position: the lowest rank,
        # then the leftmost position, is merged first. Stale heap entries are
        # recognised by the rank of the pair now at that position (a rank names
        # exactly one pair).
        ranks = self._ranks
        ids = list(symbols)
        n = len(ids)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            rank = ranks.get((ids[i] << 32) | ids[i + 1])
            if rank is not None:
                heap.append((rank << 40) | i)
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        mask = (1 << 40) - 1
        pops = len(heap)
        while heap:
            top = pop(heap)
            rank, i = top >> 40, top & mask
            j = nxt[i]
            if j < 0 or ids[i] < 0 or ranks.get((ids[i] << 32) | ids[j]) != rank:
                continue
            new_id = 256 + rank
            ids[i] = new_id
            ids[j] = -1
            k = nxt[j]
            nxt[i] = k
            if k >= 0:
                prv[k] = i
                r = ranks.get((new_id << 32) | ids[k])
                if r is not None:
                    push(heap, (r << 40) | i)
                    pops += 1
            p = prv[i]
            if p >= 0:
                r = ranks.get((ids[p] << 32) | new_id)
                if r is not None:
                    push(heap, (r << 40) | p)
                    pops += 1
        self.work.heap_steps += pops
        out = []
        i = 0
        while i >= 0:
            out.append(ids[i])
            i = nxt[i]
        return tuple(out)

    def _lookup_arrays(self):
        """(byte_pair_rank, keys, ranks): numpy tables of :meth:`_merge_long`, built once.

        ``byte_pair_rank[left * 256 + right]`` is the rank of a pair of two byte ids
        (``_NO_RANK`` if none); ``keys`` are the sorted pair keys ``left << 32 | right``
        of all merges and ``ranks`` their ranks, for ``searchsorted``.
        """
        if self._rank_arrays is None:
            import numpy as np

            pairs = self.merges.pairs
            byte_pair_rank = np.full(1 << 16, _NO_RANK, dtype=np.int64)
            keys = np.fromiter(((left << 32) | right for left, right in pairs), dtype=np.int64, count=len(pairs))
            ranks = np.arange(len(pairs), dtype=np.int64)
            byte_merges = [(k, left, right) for k, (left, right) in enumerate(pairs) if left < 256 and right < 256]
            for k, left, right in byte_merges:
                byte_pair_rank[(left << 8) | right] = k
            order = np.argsort(keys, kind="stable")
            self._rank_arrays = (byte_pair_rank, keys[order], ranks[order])
        return self._rank_arrays

    def _pair_ranks(self, left, right):
        """Ranks of the pairs ``(left[i], right[i])`` (int64 arrays), ``_NO_RANK`` where none."""
        import numpy as np

        _, keys, ranks = self._lookup_arrays()
        if keys.size == 0:
            return np.full(left.size, _NO_RANK, dtype=np.int64)
        wanted = (left << 32) | right
        at = np.searchsorted(keys, wanted)
        np.minimum(at, keys.size - 1, out=at)
        return np.where(keys[at] == wanted, ranks[at], _NO_RANK)

    def _merge_long(self, chunk: bytes) -> tuple[int, ...]:
        # Rank by rank over the whole array. A merge's own ids are older than it, so
        # a pair made by merging rank r has a rank above r: merging every occurrence of
        # the lowest rank present, left to right, is exactly the reference order. Only
        # when left == right can two occurrences overlap ("aaa"); leftmost-first then
        # takes every other one of each run of consecutive positions.
        import numpy as np

        byte_pair_rank, _, _ = self._lookup_arrays()
        pairs = self.merges.pairs
        work = self.work
        ids = np.frombuffer(chunk, dtype=np.uint8).astype(np.int64)
        pair_rank = byte_pair_rank[(ids[:-1] << 8) | ids[1:]]
        while ids.size > 1:
            work.vector_passes += 1
            work.vector_elements += ids.size
            rank = int(pair_rank.min())
            if rank == _NO_RANK:
                return tuple(ids.tolist())
            at = np.flatnonzero(pair_rank == rank)
            left, right = pairs[rank]
            if left == right and at.size > 1:
                run_start = np.empty(at.size, dtype=bool)
                run_start[0] = True
                np.not_equal(at[1:], at[:-1] + 1, out=run_start[1:])
                index = np.arange(at.size)
                first = np.maximum.accumulate(np.where(run_start, index, 0))
                at = at[(index - first) % 2 == 0]
            ids[at] = 256 + rank
            ids = np.delete(ids, at + 1)
            pair_rank = np.delete(pair_rank, at)
            # The pairs on both sides of each merged symbol changed: look them up again.
            merged = at - np.arange(at.size)
            touched = np.concatenate((merged - 1, merged))
            touched = touched[(touched >= 0) & (touched < ids.size - 1)]
            pair_rank[touched] = self._pair_ranks(ids[touched], ids[touched + 1])
            if at.size * _PASS_MIN_SHARE < ids.size:
                break
        if ids.size <= 1:
            return tuple(ids.tolist())
        return self._merge_heap(ids.tolist())


_NO_RANK = 1 << 62
"""Rank of a pair that is no merge in :meth:`Encoder._merge_long` (above every rank)."""


@dataclass
class MergeWork:
    """Steps an :class:`Encoder` has taken (cumulative; a timing-free cost measure).

    Attributes:
        scan_steps: pairs looked at by the quadratic loop of short chunks.
        heap_steps: heap entries pushed (and so popped) by the heap merge.
        vector_passes: whole-array passes over long chunks.
        vector_elements: symbols those passes went over (each costs a few ns in numpy).
    """

    scan_steps: int = 0
    heap_steps: int = 0
    vector_passes: int = 0
    vector_elements: int = 0

    @property
    def interpreted_steps(self) -> int:
        """Steps run one by one by the Python interpreter (scan + heap)."""
        return self.scan_steps + self.heap_steps


def train(corpus: bytes, vocab_size: int) -> Merges:
    """Learn ``vocab_size - 256`` merges from ``corpus`` (module doc, "Training").

    Args:
        corpus: training text as bytes (any bytes).
        vocab_size: wanted number of ids, 256 .. 2**31; fewer result when the corpus
            runs out of pairs (e.g. a tiny corpus).

    Returns:
        The merges, deterministic for a given corpus and size.

    Raises:
        TokenizerError: ``vocab_size`` out of range.
    """
    if not 256 <= vocab_size < _MAX_ID:
        raise TokenizerError(None, f"vocab_size must be between 256 and {_MAX_ID - 1}, got {vocab_size}")
    chunk_counts = Counter(PRETOKEN_PATTERN.findall(corpus))
    words: list[list[int]] = []
    freqs: list[int] = []
    for chunk, freq in chunk_counts.items():
        if len(chunk) >= 2:
            words.append(list(chunk))
            freqs.append(freq)

    pair_count: dict[tuple[int, int], int] = {}
    pair_words: dict[tuple[int, int], set[int]] = {}
    for w, ids in enumerate(words):
        freq = freqs[w]
        for pair in pairwise(ids):
            pair_count[pair] = pair_count.get(pair, 0) + freq
            pair_words.setdefault(pair, set()).add(w)

    # Lazy max-heap: an entry is current when its count equals pair_count[pair].
    heap = [(-c, pair) for pair, c in pair_count.items()]
    heapq.heapify(heap)
    tokens = [bytes([b]) for b in range(256)]
    known = set(tokens)
    forbidden: set[tuple[int, int]] = set()  # pairs whose bytes are already a token
    pairs: list[tuple[int, int]] = []

    while len(tokens) < vocab_size and heap:
        neg, pair = heapq.heappop(heap)
        if neg == 0 or pair in forbidden or pair_count.get(pair, 0) != -neg:
            continue
        token = tokens[pair[0]] + tokens[pair[1]]
        if token in known:
            # Not seen in practice (greedy global merges segment a byte string the same
            # way everywhere); the guard keeps the format's distinct-bytes rule whatever.
            forbidden.add(pair)
            continue
        new_id = len(tokens)
        tokens.append(token)
        known.add(token)
        pairs.append(pair)
        changed: set[tuple[int, int]] = set()
        left, right = pair
        for w in pair_words.pop(pair):
            ids = words[w]
            freq = freqs[w]
            for old in pairwise(ids):
                pair_count[old] -= freq
                changed.add(old)
            merged = merge_pair(ids, left, right, new_id)
            words[w] = merged
            for new in pairwise(merged):
                pair_count[new] = pair_count.get(new, 0) + freq
                changed.add(new)
                pair_words.setdefault(new, set()).add(w)
        for p in changed:
            c = pair_count[p]
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                del pair_count[p]
    return Merges(tuple(pairs))


def read_corpus(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a corpus file; raises :class:`CorpusError` when it cannot be read."""
    try:
        return read_file(path)
    except OSError as exc:
        raise CorpusError(path, f"cannot read corpus: {exc.strerror or exc}") from None


def default_corpus() -> bytes:
    """The default corpus: Python's ``pydoc_data.topics`` (~465 kB of English prose).

    The topic texts in sorted key order, joined by one ``\\n``, UTF-8 encoded. Present
    on every Python installation; its exact bytes depend on the Python version.
    """
    from pydoc_data.topics import topics

    return "\n".join(topics[key] for key in sorted(topics)).encode("utf-8")
