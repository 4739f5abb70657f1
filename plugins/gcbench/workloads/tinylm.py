"""TinyLM training or inference, fed by one of three preprocessing paths.

The execution-regime study compares where the text becomes token ids:

* ``torch``: inside the PyTorch process, on the fly. In the main window each batch's
  text is encoded by the Python reference encoder (:class:`gcbench.tokenizer.Encoder`)
  just before it is copied to the device, as a pure-PyTorch pipeline does; the main
  window therefore holds tokenization and model work together.
* ``external-go`` / ``external-rust``: the whole corpus is tokenized beforehand by the
  native program (``gcbench-tok-go`` / ``gcbench-tok-rust``, run as an argv list, never
  through a shell) inside its own measured window ``tokenize`` (duration; CPU energy
  where RAPL is readable), and the main window reads ids from the memory-mapped token
  file (:func:`gcbench.tokenizer.read_tokens`, which refuses a file made with other
  merges).

The trial reports J/token of the GPU window alone and end to end (the ``tokenize``
window added), so both views of the regime comparison come from one trial.

Every repetition's main window reads the token stream from its start (the warm-up reads
it too, and the sources are reset after it), and the torch path's encoder has seen the
whole corpus before the warm-up, so its chunk cache is in steady state when the window
opens: repetitions differ by their seed, never by where the data start or how warm the
cache is.

Batches: the token stream is cut into sequences of ``context_length + 1`` ids that
advance by ``context_length`` (inputs ``[:-1]``, next-token targets ``[1:]``), in order,
wrapping at the corpus end; ``batch_size`` sequences per step. Both paths consume the
stream the same way; the torch path encodes, per batch, just the text that batch needs
(cut before a space or newline, so ids near a cut can differ slightly from
whole-corpus ids).

Each batch goes to the device with a plain blocking ``tensor.to(device)``, as a simple
PyTorch loop does, on both paths; the paths differ only in where the ids come from.

Model: :class:`gcbench.workloads.tinylm_model.TinyLM`. ``mode: infer`` runs forward
passes under ``torch.inference_mode()``; ``mode: train`` runs forward, backward and an
AdamW step. Precision: ``fp32``; ``bf16`` (weights and activations in bfloat16; skipped
on a GPU without bf16); ``amp`` (CUDA: float16 autocast with a gradient scaler; CPU:
bfloat16 autocast, reported as ``amp-bf16-cpu``).

Merges: the ``merges`` file when given, else trained once from the corpus with
``vocab_size`` and cached as ``<cache_dir>/merges-<corpus sha256[:16]>-<vocab_size>.txt``
(outside every window).

Settings (defaults): layers 2, d_model 128, heads 4, context_length 128, batch_size 8,
precision ``fp32``, mode ``infer``, path ``torch``, corpus None (Python's
``pydoc_data.topics``), merges None, vocab_size 2048, lr 3e-4, cache_dir None
(``$GCBENCH_HOME/cache/tinylm``), tokenizer_bin None (built by
``gcbench.tokenizer.build.build_local`` into ``$GCBENCH_HOME/tools``),
tokenize_timeout_s 600.

Window: steps, or seconds (whole steps until the time is reached); CUDA work is
synchronised before the window closes.

Returns (units in names): tokens (input positions processed in the main window:
steps x batch_size x context_length), steps, sequences, batch_size, context_length,
loss (last step's mean cross-entropy, nats/token), loss_mean (over the window), mode,
path, precision, precision_effective, device_kind, parameters, vocab_size (effective),
merges_sha256, corpus_bytes, corpus_sha256, tokenized_in_window_tokens (torch path: ids
the encoder produced inside the main window), encoder_merge_steps_in_window (torch path:
BPE merge steps the encoder ran in the window, 0 when its cache held every chunk), and
for external paths
tokenize_duration_s, tokenize_tokens, tokenizer_impl, tokenizer_bin; settings_effective
and settings_not_in_effect (:func:`gcbench.workloads.effective`): ``precision: amp``
without CUDA is not in effect (bfloat16 autocast on the CPU is not the float16 AMP a
GPU runs).

Raises:
    ValueError: unknown mode/path/precision, heads not dividing d_model, a corpus with
        fewer than context_length + 2 tokens.
    SkipTrial: bf16 requested on a GPU without bf16 (``not_in_effect`` names precision).
    gcbench.tokenizer.TokenizerError (and subclasses): unreadable corpus or merges,
        failed tokenizer build, token file from other merges.
    RuntimeError: the native tokenizer exited non-zero (with its stderr).
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from gcbench.kinds import WorkloadKind
from gcbench.spec import TrialSpec
from gcbench.workloads import AMP_ON_CPU, TrialContext, effective, settings
from gcbench.workloads._loop import device_kind, run_steps, seed_everything, synchronizer

DEFAULTS: dict[str, Any] = {
    "layers": 2,
    "d_model": 128,
    "heads": 4,
    "context_length": 128,
    "batch_size": 8,
    "precision": "fp32",
    "mode": "infer",
    "path": "torch",
    "corpus": None,
    "merges": None,
    "vocab_size": 2048,
    "lr": 3e-4,
    "cache_dir": None,
    "tokenizer_bin": None,
    "tokenize_timeout_s": 600,
}
PATHS = ("torch", "external-go", "external-rust")


# ----------------------------------------------------------------------------------
# Token sources: both yield int64 arrays [batch_size, context_length + 1]
# ----------------------------------------------------------------------------------


class MemmapSource:
    """Sequences read from a token file's memory map (external paths)."""

    def __init__(self, ids, context_length: int):
        if len(ids) < context_length + 2:
            raise ValueError(
                f"token file has {len(ids)} ids; context_length {context_length} needs at least {context_length + 2}"
            )
        self.ids = ids
        self.t = context_length
        self.pos = 0

    def batch(self, batch_size: int):
        import numpy as np

        out = np.empty((batch_size, self.t + 1), dtype=np.int64)
        for b in range(batch_size):
            if self.pos + self.t + 1 > len(self.ids):
                self.pos = 0
            out[b] = self.ids[self.pos : self.pos + self.t + 1]
            self.pos += self.t
        return out


class StreamSource:
    """Sequences encoded on demand from the corpus text by the Python encoder (torch path).

    Each batch encodes just the text it needs: the byte count is estimated from the
    running bytes-per-token ratio, and a chunk ends before a space or newline (a
    pre-token boundary, never inside a UTF-8 character). The corpus wraps at its end.
    """

    def __init__(self, corpus: bytes, encoder, context_length: int):
        self.corpus = corpus
        self.encoder = encoder
        self.t = context_length
        self.cursor = 0
        self.buf: list[int] = []
        self.off = 0
        self.encoded_tokens = 0
        self.encoded_bytes = 0

    def _refill(self, need_tokens: int) -> None:
        bytes_per_token = self.encoded_bytes / self.encoded_tokens if self.encoded_tokens else 4.0
        want = max(64, int(need_tokens * bytes_per_token * 1.05))
        end = min(len(self.corpus), self.cursor + want)
        if end < len(self.corpus):
            cut = max(self.corpus.rfind(b" ", self.cursor, end), self.corpus.rfind(b"\n", self.cursor, end))
            if cut > self.cursor:
                end = cut
        ids = self.encoder.encode(self.corpus[self.cursor : end])
        self.encoded_tokens += len(ids)
        self.encoded_bytes += end - self.cursor
        self.cursor = 0 if end >= len(self.corpus) else end
        if self.off > 0:
            del self.buf[: self.off]
            self.off = 0
        self.buf.extend(ids)

    def batch(self, batch_size: int):
        import numpy as np

        need = batch_size * self.t + 1
        while len(self.buf) - self.off < need:
            self._refill(need - (len(self.buf) - self.off))
        out = np.empty((batch_size, self.t + 1), dtype=np.int64)
        for b in range(batch_size):
            out[b] = self.buf[self.off : self.off + self.t + 1]
            self.off += self.t
        return out


# ----------------------------------------------------------------------------------
# Preparation (outside every window)
# ----------------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_dir(cfg: dict[str, Any]) -> Path:
    """The merges/corpus cache folder (created)."""
    if cfg["cache_dir"]:
        path = Path(cfg["cache_dir"])
    else:
        from gcbench import config

        path = config.home() / "cache" / "tinylm"
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_corpus(cfg: dict[str, Any]) -> bytes:
    """The corpus bytes: the ``corpus`` file, else Python's pydoc_data.topics text."""
    from gcbench import tokenizer

    return tokenizer.read_corpus(cfg["corpus"]) if cfg["corpus"] else tokenizer.default_corpus()


def load_merges(cfg: dict[str, Any], corpus: bytes, cache: Path):
    """The ``merges`` file, else merges trained once per (corpus, vocab_size) and cached."""
    from gcbench import tokenizer

    if cfg["merges"]:
        return tokenizer.Merges.load(cfg["merges"]), False
    path = cache / f"merges-{_sha256(corpus)[:16]}-{int(cfg['vocab_size'])}.txt"
    if path.exists():
        return tokenizer.Merges.load(path), False
    merges = tokenizer.train(corpus, int(cfg["vocab_size"]))
    merges.save(path)
    return merges, True


def corpus_file(cfg: dict[str, Any], corpus: bytes, cache: Path) -> Path:
    """A file holding the corpus, for the native tokenizer's ``--in``."""
    if cfg["corpus"]:
        return Path(cfg["corpus"])
    path = cache / f"corpus-default-{_sha256(corpus)[:16]}.txt"
    if not path.exists() or path.stat().st_size != len(corpus):
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(corpus)
        tmp.replace(path)
    return path


def tokenizer_binary(cfg: dict[str, Any], impl: str) -> Path:
    """The native tokenizer: ``tokenizer_bin`` when set, else built (cached) by build_local."""
    if cfg["tokenizer_bin"]:
        return Path(cfg["tokenizer_bin"])
    from gcbench import config
    from gcbench.tokenizer.build import build_local

    return Path(build_local(impl, config.home() / "tools"))


def run_native_tokenizer(binary: Path, merges_path: Path, corpus_path: Path, out_path: Path, timeout_s: float) -> None:
    """``BINARY --merges M --in CORPUS --out TOKENS`` as an argv list; RuntimeError on failure."""
    argv = [str(binary), "--merges", str(merges_path), "--in", str(corpus_path), "--out", str(out_path)]
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()[-2000:]
        raise RuntimeError(f"{binary.name} exited with status {proc.returncode}: {err}")


# ----------------------------------------------------------------------------------
# The workload
# ----------------------------------------------------------------------------------


def check_settings(cfg: dict[str, Any]) -> None:
    """Raise ValueError on unknown choices or inconsistent sizes."""
    if cfg["mode"] not in ("infer", "train"):
        raise ValueError(f"tinylm mode must be infer or train, got {cfg['mode']!r}")
    if cfg["path"] not in PATHS:
        raise ValueError(f"tinylm path must be one of {', '.join(PATHS)}, got {cfg['path']!r}")
    if cfg["precision"] not in ("fp32", "bf16", "amp"):
        raise ValueError(f"tinylm precision must be fp32, bf16 or amp, got {cfg['precision']!r}")
    for key in ("layers", "d_model", "heads", "context_length", "batch_size"):
        if int(cfg[key]) < 1:
            raise ValueError(f"tinylm {key} must be >= 1, got {cfg[key]}")
    if int(cfg["d_model"]) % int(cfg["heads"]):
        raise ValueError(f"tinylm d_model {cfg['d_model']} must be a multiple of heads {cfg['heads']}")


def run(spec: TrialSpec, ctx: TrialContext) -> dict:
    """Prepare, warm up, and run TinyLM in the main window; see the module docstring."""
    from gcbench import tokenizer
    from gcbench.errors import SkipTrial

    cfg = settings(spec, DEFAULTS)
    check_settings(cfg)
    import torch
    import torch.nn.functional as F

    from gcbench.workloads.tinylm_model import TinyLM, count_parameters

    seed_everything(spec.seed)
    dev = torch.device(ctx.device)
    kind = device_kind(ctx.device)
    sync = synchronizer(ctx.device)
    cache = cache_dir(cfg)
    corpus = load_corpus(cfg)
    merges, trained = load_merges(cfg, corpus, cache)
    if trained:
        ctx.log(f"trained {merges.vocab_size}-id merges from the corpus ({len(corpus)} bytes)")
    T, B = int(cfg["context_length"]), int(cfg["batch_size"])
    out: dict[str, Any] = {}

    if cfg["path"] == "torch":
        encoder = tokenizer.Encoder(merges)
        encoder.encode(corpus)  # its chunk cache in steady state before any window: every chunk seen once
        source: Any = StreamSource(corpus, encoder, T)
    else:
        impl = cfg["path"].removeprefix("external-")
        binary = tokenizer_binary(cfg, impl)
        merges_path = (
            Path(cfg["merges"])
            if cfg["merges"]
            else cache / f"merges-{_sha256(corpus)[:16]}-{int(cfg['vocab_size'])}.txt"
        )
        in_path = corpus_file(cfg, corpus, cache)
        tok_path = Path(ctx.outdir) / "corpus.tok"
        tok_path.unlink(missing_ok=True)
        with ctx.window("tokenize"):
            t0 = time.monotonic()
            run_native_tokenizer(binary, merges_path, in_path, tok_path, float(cfg["tokenize_timeout_s"]))
            tokenize_s = time.monotonic() - t0
        ids = tokenizer.read_tokens(tok_path, merges)
        source = MemmapSource(ids, T)
        out.update(
            {
                "tokenize_duration_s": tokenize_s,
                "tokenize_tokens": int(len(ids)),
                "tokenizer_impl": impl,
                "tokenizer_bin": str(binary),
            }
        )

    # Precision
    precision = cfg["precision"]
    on_cuda = kind == "cuda"
    not_in_effect: dict[str, str] = {}
    model_dtype = torch.float32
    autocast: Any = nullcontext
    scaler = None
    if precision == "bf16":
        if on_cuda and not torch.cuda.is_bf16_supported():
            why = f"bf16 is not supported on {torch.cuda.get_device_name(dev)}"
            raise SkipTrial(why, not_in_effect={"precision": why})
        model_dtype = torch.bfloat16
        precision_effective = "bf16" if on_cuda else "bf16-cpu"
    elif precision == "amp" and on_cuda:
        autocast = lambda: torch.autocast("cuda", dtype=torch.float16)  # noqa: E731
        precision_effective = "amp-fp16"
        if cfg["mode"] == "train":
            scaler = torch.amp.GradScaler("cuda")
    elif precision == "amp":
        autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
        precision_effective = "amp-bf16-cpu"
        not_in_effect["precision"] = AMP_ON_CPU
    else:
        precision_effective = "fp32"

    model = TinyLM(merges.vocab_size, T, int(cfg["layers"]), int(cfg["d_model"]), int(cfg["heads"]))
    model = model.to(device=dev, dtype=model_dtype)
    V = merges.vocab_size
    train = cfg["mode"] == "train"
    if train:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]))
    else:
        model.eval()
    loss_sum = torch.zeros((), device=dev, dtype=torch.float64)
    last_loss = torch.zeros((), device=dev, dtype=torch.float64)

    def step(_: int) -> None:
        batch = torch.from_numpy(source.batch(B)).to(dev, non_blocking=False)
        x, y = batch[:, :-1], batch[:, 1:]
        if train:
            with autocast():
                loss = F.cross_entropy(model(x).float().reshape(-1, V), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
        else:
            with torch.inference_mode(), autocast():
                loss = F.cross_entropy(model(x).float().reshape(-1, V), y.reshape(-1))
        d = loss.detach().double()
        loss_sum.add_(d)
        last_loss.copy_(d)

    run_steps(spec.warmup, step, default_steps=0)
    if sync is not None:
        sync()
    loss_sum.zero_()
    # every repetition's window reads the token stream from its start, however many steps the warm-up took
    source = StreamSource(corpus, source.encoder, T) if cfg["path"] == "torch" else MemmapSource(ids, T)
    encoded_before = getattr(source, "encoded_tokens", 0)
    merge_steps_before = source.encoder.work.interpreted_steps if cfg["path"] == "torch" else 0
    with ctx.window():
        # No per-step synchronisation: host-side tokenization overlaps queued GPU work,
        # which is the point of the regime comparison; one sync closes the window.
        steps = run_steps(spec.window, step, default_steps=10)
        if sync is not None:
            sync()
    out.update(
        {
            "tokens": steps * B * T,
            "steps": steps,
            "sequences": steps * B,
            "batch_size": B,
            "context_length": T,
            "loss": float(last_loss),
            "loss_mean": float(loss_sum) / steps if steps else None,
            "mode": cfg["mode"],
            "path": cfg["path"],
            "precision": precision,
            "precision_effective": precision_effective,
            "device_kind": kind,
            "parameters": count_parameters(model),
            "vocab_size": V,
            "merges_sha256": merges.sha256,
            "corpus_bytes": len(corpus),
            "corpus_sha256": _sha256(corpus),
            "tokenized_in_window_tokens": (source.encoded_tokens - encoded_before) if cfg["path"] == "torch" else 0,
            "encoder_merge_steps_in_window": (
                source.encoder.work.interpreted_steps - merge_steps_before if cfg["path"] == "torch" else 0
            ),
            **effective(
                cfg, {"precision": precision_effective} if precision_effective != precision else None, not_in_effect
            ),
        }
    )
    if cfg["path"] != "torch":
        del source, ids
        (Path(ctx.outdir) / "corpus.tok").unlink(missing_ok=True)
    return out


KIND = WorkloadKind(
    name="tinylm",
    run="gcbench.workloads.tinylm:run",
    description="TinyLM train/infer fed by in-process or external tokenization (the regime study)",
    defaults=DEFAULTS,
    check_settings=check_settings,
    unit="tokens",
    primary_metrics=("j_per_token",),
    metrics=("j_per_token", "tokens_per_s", "e2e_j_per_token"),
    compared=("j_per_token", "tokens_per_s", "e2e_j_per_token"),
    paired=("j_per_token", "tokens_per_s"),
    energy_time=(("j_per_token",), "s_per_token"),
    study="regime-tokens",
)
"""The kind's registration (entry point ``tinylm`` of group ``gcbench.workloads``)."""
