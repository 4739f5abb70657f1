"""TinyLM's input pipeline: the token batches, where they are encoded, and in what order.

Imported by :func:`gcbench.workloads.tinylm.run` only (it imports torch and numpy).

**One token stream on every path.** The stream is the whole corpus's ids as
:class:`gcbench.tokenizer.Encoder` gives them (the ids the native tokenizers write to a
token file). It is cut into sequences of ``T + 1`` ids advancing by ``T``; sequence
``s`` starts at id ``(s mod K) * T`` with ``K = (n - T - 1) // T + 1`` (the stream wraps
where the next sequence would pass its end); batch ``i`` holds sequences ``i*B .. i*B +
B - 1``. A batch is a function of its index alone, so any process can make any batch.

**Where the ids come from.** External paths read them from the token file
(:class:`TokenFileBatches`). The torch path encodes each batch's text when the batch is
made (:class:`TextBatches`): before the trial's windows, a plan of the corpus's
pre-token chunks (:class:`ChunkPlan`: byte offset and id offset of every chunk) is
made by encoding the corpus once, which also warms the encoder; batch ``i`` then
encodes the bytes of the chunks that cover its ids and drops the ids before its first.
Chunk boundaries are safe cuts (the pre-tokenizer's matches depend on nothing past a
chunk's end, see :mod:`gcbench.tokenizer.bpe`), so the ids are exactly those of the
stream, as the token file has them.

**Loader.** ``workers: 0`` is the synchronous loop: the training/inference process
makes each batch just before its step and copies it with a blocking ``.to(device)``.
``workers: N`` is a ``torch.utils.data.DataLoader`` over :class:`BatchStream`, an
``IterableDataset`` whose worker ``w`` of ``N`` makes batches ``w, w + N, w + 2N, ...``
(``prefetch`` batches ahead per worker, ``pin_memory`` into page-locked memory for a
non-blocking copy); :class:`OrderedBatches` hands them on by batch index, holding any
that come early, so the order is exact whatever the worker count (the DataLoader takes
workers round-robin, which is that order already; the index makes it a checked fact).

**Encoder.** ``tokenizer: reference`` is the Python reference encoder, ``hf`` the same
tokenizer in Hugging Face ``tokenizers`` (:func:`gcbench.tokenizer.hf.hf_tokenizer`; the
same ids on valid UTF-8, so the corpus must be valid UTF-8). Each process that encodes
holds a warmed encoder before the first measured window: the reference encoder is the
one the plan was made with (its chunk cache holds every chunk of the corpus; workers get
a copy of it), an ``hf`` encoder encodes the corpus once when it is built. A reference
encoder reports its cache misses per batch (0 in steady state).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from gcbench.tokenizer import PRETOKEN_PATTERN, Encoder, Merges


def stream_length_ok(n_ids: int, context_length: int) -> None:
    """Raise ValueError when ``n_ids`` cannot hold one sequence and its next token."""
    if n_ids < context_length + 2:
        raise ValueError(
            f"the corpus has {n_ids} ids; context_length {context_length} needs at least {context_length + 2}"
        )


def sequence_starts(batch_index: int, batch_size: int, context_length: int, n_ids: int) -> np.ndarray:
    """Id offsets of the sequences of batch ``batch_index`` (module doc), int64 [batch_size]."""
    per_lap = (n_ids - context_length - 1) // context_length + 1
    s = np.arange(batch_index * batch_size, (batch_index + 1) * batch_size, dtype=np.int64)
    return (s % per_lap) * context_length


# ----------------------------------------------------------------------------- encoders


class Codec:
    """An in-process encoder: ``encode(bytes) -> list[int]``; ``cache_entries`` (None: unknown)."""

    name = ""

    def encode(self, data: bytes) -> list[int]:
        raise NotImplementedError

    @property
    def cache_entries(self) -> int | None:
        return None


class ReferenceCodec(Codec):
    """The Python reference encoder (:class:`gcbench.tokenizer.Encoder`)."""

    name = "reference"

    def __init__(self, encoder: Encoder):
        self.encoder = encoder

    def encode(self, data: bytes) -> list[int]:
        return self.encoder.encode(data)

    @property
    def cache_entries(self) -> int | None:
        return self.encoder.cache_entries


class HfCodec(Codec):
    """Hugging Face ``tokenizers`` built from the same merges (ids identical on valid UTF-8)."""

    name = "hf"

    def __init__(self, merges: Merges):
        from gcbench.tokenizer.hf import hf_tokenizer

        self.tokenizer = hf_tokenizer(merges)

    def encode(self, data: bytes) -> list[int]:
        return self.tokenizer.encode_batch_fast([data.decode("utf-8")])[0].ids


def hf_available() -> bool:
    """Whether Hugging Face ``tokenizers`` can be imported here."""
    import importlib.util

    return importlib.util.find_spec("tokenizers") is not None


# ----------------------------------------------------------------------------- the plan of the corpus


@dataclass
class ChunkPlan:
    """Byte and id offsets of every pre-token chunk of a corpus.

    Attributes:
        byte_starts: int64 [chunks + 1], the last the corpus length.
        id_starts: int64 [chunks + 1], the last the number of ids.
        n_ids: ids of the whole corpus.
        seconds: time taken to make it (encoding the corpus once), s.
    """

    byte_starts: np.ndarray
    id_starts: np.ndarray
    n_ids: int
    seconds: float

    @classmethod
    def make(cls, corpus: bytes, encoder: Encoder) -> ChunkPlan:
        """Encode ``corpus`` once with ``encoder`` (warming its cache) and locate its chunks."""
        t0 = time.monotonic()
        ids = np.asarray(encoder.encode(corpus), dtype=np.int64)
        lengths = np.asarray([len(b) for b in encoder.merges.token_bytes], dtype=np.int64)
        token_starts = np.concatenate(([0], np.cumsum(lengths[ids])[:-1])) if len(ids) else np.zeros(0, np.int64)
        chunk_starts = np.fromiter((m.start() for m in PRETOKEN_PATTERN.finditer(corpus)), dtype=np.int64)
        # every chunk starts a token (tokens never cross chunks)
        id_starts = np.searchsorted(token_starts, chunk_starts)
        return cls(
            byte_starts=np.append(chunk_starts, len(corpus)),
            id_starts=np.append(id_starts, len(ids)),
            n_ids=int(len(ids)),
            seconds=time.monotonic() - t0,
        )

    def span(self, first_id: int, end_id: int) -> tuple[int, int, int]:
        """``(byte_start, byte_end, skip)``: the chunks covering ids ``[first_id, end_id)``,
        and how many ids of theirs come before ``first_id``."""
        k0 = int(np.searchsorted(self.id_starts, first_id, side="right")) - 1
        k1 = int(np.searchsorted(self.id_starts, end_id, side="left"))
        return int(self.byte_starts[k0]), int(self.byte_starts[k1]), first_id - int(self.id_starts[k0])


# ----------------------------------------------------------------------------- batch sources


class TextBatches:
    """The torch path's batches: each one's text encoded when it is made (module doc).

    Args:
        corpus: the corpus bytes.
        plan: its :class:`ChunkPlan`.
        merges: the tokenizer.
        tokenizer: ``reference`` or ``hf``.
        batch_size, context_length: B and T.
        encoder: the warmed reference encoder the plan was made with (used, and copied
            into workers, for ``reference``).

    Raises:
        ValueError: a stream shorter than one sequence; ``hf`` on a corpus that is not
            valid UTF-8.
    """

    def __init__(
        self,
        corpus: bytes,
        plan: ChunkPlan,
        merges: Merges,
        tokenizer: str,
        batch_size: int,
        context_length: int,
        encoder: Encoder | None = None,
    ):
        stream_length_ok(plan.n_ids, context_length)
        if tokenizer == "hf":
            try:
                corpus.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"tinylm tokenizer hf takes valid UTF-8 text only; the corpus is not ({exc})"
                ) from None
        self.corpus, self.plan, self.merges, self.tokenizer = corpus, plan, merges, tokenizer
        self.B, self.T = batch_size, context_length
        self.codec: Codec | None = ReferenceCodec(encoder) if tokenizer == "reference" and encoder else None
        self.warm: dict[str, Any] | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.tokenizer == "hf":
            state["codec"] = None  # built (and warmed) in the worker that uses it
        return state

    def prepare(self) -> dict[str, Any]:
        """Build and warm the encoder of this process (once); returns what was done:
        ``{"tokenizer", "warmed_bytes", "seconds", "cache_entries"}``."""
        if self.warm is not None:
            return self.warm
        t0 = time.monotonic()
        warmed = 0
        if self.codec is None:
            if self.tokenizer == "hf":
                self.codec = HfCodec(self.merges)
            else:
                self.codec = ReferenceCodec(Encoder(self.merges))
            self.codec.encode(self.corpus)  # fills the word cache: the window opens in steady state
            warmed = len(self.corpus)
        self.warm = {
            "tokenizer": self.codec.name,
            "warmed_bytes": warmed,
            "seconds": time.monotonic() - t0,
            "cache_entries": self.codec.cache_entries,
        }
        return self.warm

    def batch(self, i: int) -> tuple[np.ndarray, int, int | None]:
        """Batch ``i``: ids int64 [B, T + 1], ids encoded to make it, and the encoder's
        cache misses meanwhile (None when unknown)."""
        codec = self.codec
        if codec is None:
            self.prepare()
            codec = self.codec
        assert codec is not None
        before = codec.cache_entries
        starts = sequence_starts(i, self.B, self.T, self.plan.n_ids)
        out = np.empty((self.B, self.T + 1), dtype=np.int64)
        encoded = 0
        b = 0
        while b < self.B:
            # a run of sequences that follow each other in the stream: one span of text
            c = 1
            while b + c < self.B and starts[b + c] == starts[b] + c * self.T:
                c += 1
            first, end = int(starts[b]), int(starts[b]) + c * self.T + 1
            lo, hi, skip = self.plan.span(first, end)
            ids = codec.encode(self.corpus[lo:hi])
            encoded += len(ids)
            run = np.asarray(ids[skip : skip + c * self.T + 1], dtype=np.int64)
            for k in range(c):
                out[b + k] = run[k * self.T : k * self.T + self.T + 1]
            b += c
        after = codec.cache_entries
        misses = None if before is None or after is None else max(0, after - before)
        return out, encoded, misses


class TokenFileBatches:
    """The external paths' batches: read from the token file's memory map.

    Args:
        path: the token file; opened (and checked against ``merges``) in the process
            that reads it, so a worker never gets a copy of its contents.
        merges: the tokenizer it must have been made with.
        batch_size, context_length: B and T.
    """

    def __init__(self, path, merges: Merges, batch_size: int, context_length: int, ids=None):
        self.path, self.merges, self.B, self.T = path, merges, batch_size, context_length
        self.ids = ids
        if ids is not None:
            stream_length_ok(len(ids), context_length)
        self.warm: dict[str, Any] | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["ids"] = None
        return state

    def prepare(self) -> dict[str, Any]:
        if self.ids is None:
            from gcbench import tokenizer

            self.ids = tokenizer.read_tokens(self.path, self.merges)
            stream_length_ok(len(self.ids), self.T)
        self.warm = {"tokenizer": None, "warmed_bytes": 0, "seconds": 0.0, "cache_entries": None}
        return self.warm

    def batch(self, i: int) -> tuple[np.ndarray, int, int | None]:
        if self.ids is None:
            self.prepare()
        starts = sequence_starts(i, self.B, self.T, len(self.ids))
        out = np.empty((self.B, self.T + 1), dtype=np.int64)
        for b, s in enumerate(starts):
            out[b] = self.ids[s : s + self.T + 1]
        return out, 0, None


# ----------------------------------------------------------------------------- the loader


class BatchStream(IterableDataset):
    """Batches of a source, sharded by batch index over the DataLoader's workers.

    Worker ``w`` of ``N`` yields ``(i, ids [B, T+1] tensor, encoded, misses, warm)`` for
    ``i = start + w, start + w + N, ...`` without end; ``warm`` (the worker's
    :meth:`TextBatches.prepare` record) rides on its first batch only, else None.
    """

    def __init__(self, source: TextBatches | TokenFileBatches, start: int = 0):
        super().__init__()
        self.source, self.start = source, start

    def __iter__(self) -> Iterator[tuple]:
        info = get_worker_info()
        w, n = (info.id, info.num_workers) if info is not None else (0, 1)
        warm: dict[str, Any] | None = {**self.source.prepare(), "worker": w}
        for i in itertools.count(self.start + w, n):
            ids, encoded, misses = self.source.batch(i)
            yield i, torch.from_numpy(ids), encoded, misses, warm
            warm = None


class OrderedBatches:
    """The batches ``0, 1, 2, ...`` of a source, synchronously or from DataLoader workers.

    Args:
        source: a :class:`TextBatches` or :class:`TokenFileBatches`.
        workers: 0 (made here, on demand) or N DataLoader workers.
        prefetch: batches each worker makes ahead (``prefetch_factor``).
        pin_memory: page-locked batches (the DataLoader's pinning thread).

    Each :meth:`next` gives ``(ids tensor [B, T+1], encoded, misses)`` of the next
    batch index; :attr:`warm` lists each encoding process's warm-up record (workers
    report theirs with their first batch: :meth:`prime` waits for all of them).

    Raises:
        RuntimeError: a batch index missing from what the workers delivered (a broken
            order; never expected from the DataLoader).
    """

    MAX_EARLY = 1024

    def __init__(self, source, workers: int, prefetch: int = 2, pin_memory: bool = False):
        self.source, self.workers = source, workers
        self.next_index = 0
        self.early: dict[int, tuple] = {}
        self.warm: list[dict[str, Any]] = []
        self._it: Any = None
        if workers == 0:
            self.warm.append({**source.prepare(), "worker": None})
        else:
            self.loader = DataLoader(
                BatchStream(source),
                batch_size=None,
                num_workers=workers,
                prefetch_factor=prefetch,
                pin_memory=pin_memory,
            )
            self._it = iter(self.loader)

    def _pull(self) -> None:
        i, ids, encoded, misses, warm = next(self._it)
        if warm is not None:
            self.warm.append(warm)
        self.early[int(i)] = (ids, int(encoded), None if misses is None else int(misses))
        if len(self.early) > self.MAX_EARLY:
            raise RuntimeError(f"batch {self.next_index} never came from the DataLoader's workers")

    def prime(self) -> None:
        """Wait until every worker has delivered its first batch (its encoder warmed)."""
        while self._it is not None and len(self.warm) < self.workers:
            self._pull()

    def next(self) -> tuple[torch.Tensor, int, int | None]:
        i = self.next_index
        self.next_index += 1
        if self._it is None:
            ids, encoded, misses = self.source.batch(i)
            return torch.from_numpy(ids), encoded, misses
        while i not in self.early:
            self._pull()
        return self.early.pop(i)

    def close(self) -> None:
        """Stop the workers (the DataLoader's own shutdown)."""
        it, self._it = self._it, None
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
