"""TinyLM training or inference, fed in-process or by a declared preprocessor.

The execution-regime study compares where the text becomes token ids:

* ``torch``: inside the PyTorch pipeline, on the fly: each batch's text is encoded by
  the in-process encoder (``tokenizer``: the Python reference
  :class:`gcbench.tokenizer.Encoder`, or Hugging Face ``tokenizers`` built from the same
  merges, ids identical) when the batch is made.
* ``external-<name>``: the whole corpus is tokenized beforehand by a declared
  preprocessor (:mod:`gcbench.tokenizer.preprocessors`: the built-in ``go`` and ``rust``
  or a plan's own; its declared ``run`` argv, never a shell) inside its own measured
  window ``tokenize`` (duration; CPU energy where RAPL is readable); an ``output: ids``
  file is converted into a token file after that window; batches read ids from the
  memory-mapped token file (:func:`gcbench.tokenizer.read_tokens`, which refuses a file
  made with other merges). The binary is the one the DAG's build task built and checked
  against the reference for the spec's source version (``spec.preprocessor``); its build
  identity goes into the result.

The trial reports J/token of the GPU window alone and end to end (the ``tokenize``
window added), so both views of the regime comparison come from one trial.

Input pipeline (``loader``, :mod:`gcbench.workloads.tinylm_data`): ``workers: 0`` is the
synchronous loop (each batch made in the training/inference process just before its
step, then a blocking ``tensor.to(device)``); ``workers: N`` is a
``torch.utils.data.DataLoader`` over an ``IterableDataset`` that makes batches in N
worker processes, ``prefetch`` batches ahead each, ``pin_memory`` for page-locked
batches and a non-blocking copy -- the pipeline a PyTorch user writes. Either way, on
every path, batch ``i`` holds the same ids in the same order (the whole corpus's ids
cut into sequences of ``context_length + 1`` advancing by ``context_length``, wrapping
at the end; ``batch_size`` sequences per step), whatever the worker count.

Every repetition's main window reads the token stream from its start: the warm-up reads
it too, and the batches restart at index 0 after it (DataLoader workers restarted and
primed outside the window), so repetitions differ by their seed, never by where the data
start or how long the warm-up took.

Steady state: before the first window the torch path encodes the corpus once (to
locate its pre-token chunks, which also fills the reference encoder's cache; workers get
that warmed encoder, an ``hf`` encoder warms itself on the corpus), and the loader is
primed (every worker has delivered its first batch) before the warm-up.

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
(``$GCBENCH_HOME/cache/tinylm``), tokenizer_bin None (a binary to run instead of the
declared preprocessor's conformant build, with its declared ``run`` argv; checked against
the reference like a build before it is measured, and recorded as such),
tokenize_timeout_s 600, loader ``{workers: 0}`` (with workers, ``prefetch`` 2 and
``pin_memory`` true unless given; an integer is a worker count), tokenizer
``reference`` (or ``hf``, which needs the ``bench`` extra).

Window: steps, or seconds (whole steps until the time is reached); CUDA work is
synchronised before the window closes.

Returns (units in names): tokens (input positions processed in the main window:
steps x batch_size x context_length), steps, sequences, batch_size, context_length,
loss (last step's mean cross-entropy, nats/token), loss_mean (over the window), mode,
path, precision, precision_effective, device_kind, parameters, vocab_size (effective),
merges_sha256, corpus_bytes, corpus_sha256, tokenized_in_window_tokens (torch path: ids
encoded for the batches the main window consumed, by the workers when there are any),
encoder_cache_misses_in_window (reference encoder: chunks it had to merge, 0 in steady
state; None when unknown), encoder_warm (each encoding process's warm-up record),
loader_workers, tokenizer, device_busy_s (on a CPU device: the time spent in the
copy and the model, the trial's own busy time), and for external paths
tokenize_duration_s, tokenize_tokens, tokenizer_impl, tokenizer_bin and ``preprocessor``
(name, source and binary SHA-256, toolchain, builder, image id, conformance); settings_effective
and settings_not_in_effect (:func:`gcbench.workloads.effective`): ``precision: amp``
without CUDA is not in effect (bfloat16 autocast on the CPU is not the float16 AMP a
GPU runs).

Raises:
    ValueError: unknown mode/path/precision/tokenizer, heads not dividing d_model, a
        corpus with fewer than context_length + 2 tokens, ``tokenizer: hf`` on a corpus
        that is not valid UTF-8 (:class:`gcbench.kinds.SettingError` for ``loader``).
    SkipTrial: bf16 requested on a GPU without bf16 (``not_in_effect`` names precision).
    gcbench.tokenizer.TokenizerError (and subclasses): unreadable corpus or merges,
        failed tokenizer build, token file from other merges.
    gcbench.tokenizer.TokenizerError: the preprocessor exited non-zero (with its
        stderr), or its version is not built and conformant.
"""

from __future__ import annotations

import hashlib
import re
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
    "loader": {"workers": 0},
    "tokenizer": "reference",
}
IN_PROCESS_PATH = "torch"
"""The ``path`` that tokenizes inside the PyTorch process; every other is ``external-<name>``."""
TOKENIZERS = ("reference", "hf")
"""In-process encoders of the torch path: the Python reference, Hugging Face ``tokenizers``."""
LOADER_DEFAULTS: dict[str, Any] = {"workers": 0, "prefetch": 2, "pin_memory": True}
"""The ``loader`` setting's fields: ``prefetch`` is torch's default ``prefetch_factor``;
``pin_memory`` is what a PyTorch user writes for a GPU (it matters with workers only)."""
MAX_LOADER_WORKERS = 64
PIN_ON_CPU = (
    "only its pin_memory: no CUDA device, so batches stay in pageable memory; its workers and prefetch ran as asked"
)
"""Why ``loader.pin_memory`` is not in effect on a machine without CUDA."""
HF_MISSING = (
    "tinylm tokenizer hf needs Hugging Face tokenizers, which is not installed here "
    "(pip install -e .[bench], or the tokenizers package in the trial image)"
)


# ----------------------------------------------------------------------------------
# Settings of the input pipeline (light: plan validation reads them)
# ----------------------------------------------------------------------------------


def loader_settings(value: Any) -> dict[str, Any]:
    """The ``loader`` setting as ``{workers, prefetch, pin_memory}``.

    ``value`` is a mapping of those fields (missing ones take :data:`LOADER_DEFAULTS`),
    or an integer: the number of workers (a matrix level, e.g. ``loader: [4, 0]``).

    Raises:
        gcbench.kinds.SettingError: an unknown field or a bad value, naming
            ``loader.<field>``; ``pin_memory: true`` asked for with ``workers: 0`` (the
            synchronous loop copies pageable memory).
    """
    from gcbench.kinds import SettingError

    if isinstance(value, int) and not isinstance(value, bool):
        value = {"workers": value}
    if not isinstance(value, dict):
        raise SettingError(
            "loader",
            f"tinylm loader must be a mapping {{workers, prefetch, pin_memory}} or a worker count, got {value!r}",
        )
    unknown = sorted(set(value) - set(LOADER_DEFAULTS))
    if unknown:
        raise SettingError(
            f"loader.{unknown[0]}", f"unknown tinylm loader field {unknown[0]!r}; known: workers, prefetch, pin_memory"
        )
    cfg = {**LOADER_DEFAULTS, **value}
    for key, lo in (("workers", 0), ("prefetch", 1)):
        v = cfg[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise SettingError(f"loader.{key}", f"tinylm loader {key} must be an integer >= {lo}, got {v!r}")
    if cfg["workers"] > MAX_LOADER_WORKERS:
        raise SettingError("loader.workers", f"tinylm loader workers must be at most {MAX_LOADER_WORKERS}")
    if not isinstance(cfg["pin_memory"], bool):
        raise SettingError(
            "loader.pin_memory", f"tinylm loader pin_memory must be true or false, got {cfg['pin_memory']!r}"
        )
    if cfg["workers"] == 0 and value.get("pin_memory") is True:
        raise SettingError(
            "loader.pin_memory",
            "tinylm loader pin_memory needs workers >= 1: workers 0 is the synchronous loop, "
            "which copies pageable memory",
        )
    if cfg["workers"] == 0:
        cfg["pin_memory"] = False
    return cfg


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


def preprocessor_entry(spec: TrialSpec, path: str) -> dict[str, Any]:
    """The spec's preprocessor (name, source version, run argv, output), or for a spec
    written without one (a built-in named by ``path``) the built-in's current version.

    Raises:
        ValueError: ``path`` names no built-in and the spec carries no preprocessor.
    """
    from gcbench.tokenizer import preprocessors

    name = preprocessors.preprocessor_of_path(path)
    if spec.preprocessor and spec.preprocessor.get("name") == name:
        return dict(spec.preprocessor)
    shipped = preprocessors.builtin()
    if name not in shipped:
        raise ValueError(f"tinylm path {path!r}: the trial spec carries no declaration of preprocessor {name!r}")
    return shipped[name].spec_entry()


def tokenizer_binary(cfg: dict[str, Any], entry: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The binary to run and its build record: ``tokenizer_bin`` when set, proven by the
    same conformance check as a build (:func:`gcbench.tokenizer.preprocessors.checked_binary`,
    before anything is measured), else the conformant build of the spec's version
    (:func:`gcbench.tokenizer.preprocessors.conformant_binary`).

    Raises:
        SkipTrial: that version is not built, or the binary failed its conformance check:
            the trial is stored as skipped with the reason, nothing is measured.
    """
    from gcbench import config
    from gcbench.errors import SkipTrial
    from gcbench.tokenizer.errors import TokenizerBuildError
    from gcbench.tokenizer.preprocessors import checked_binary, conformant_binary

    if cfg["tokenizer_bin"]:
        binary = Path(cfg["tokenizer_bin"])
        try:
            return binary, checked_binary(entry, binary, config.home() / "tools")
        except TokenizerBuildError as exc:  # fails, or not identical to the reference: never measured
            raise SkipTrial(f"tokenizer_bin {binary} ({entry['name']}): {exc.message}") from None
    try:
        return conformant_binary(entry, config.home() / "tools")
    except TokenizerBuildError as exc:  # not built, or not identical to the reference: never measured
        raise SkipTrial(exc.message) from None


# ----------------------------------------------------------------------------------
# The workload
# ----------------------------------------------------------------------------------


def check_settings(cfg: dict[str, Any]) -> None:
    """Raise ValueError on unknown choices or inconsistent sizes
    (:class:`gcbench.kinds.SettingError` naming the field inside ``loader``); ``tokenizer:
    hf`` where Hugging Face ``tokenizers`` is not installed."""
    from gcbench.kinds import SettingError

    loader_settings(cfg["loader"])
    if cfg["tokenizer"] not in TOKENIZERS:
        raise SettingError(
            "tokenizer", f"tinylm tokenizer must be one of {', '.join(TOKENIZERS)}, got {cfg['tokenizer']!r}"
        )
    if cfg["tokenizer"] == "hf" and cfg["path"] == IN_PROCESS_PATH:
        import importlib.util

        if importlib.util.find_spec("tokenizers") is None:
            raise SettingError("tokenizer", HF_MISSING)
    if cfg["mode"] not in ("infer", "train"):
        raise ValueError(f"tinylm mode must be infer or train, got {cfg['mode']!r}")
    from gcbench.tokenizer.preprocessors import NAME_PATTERN, PATH_PREFIX, preprocessor_of_path

    name = preprocessor_of_path(cfg["path"])
    if cfg["path"] != IN_PROCESS_PATH and (name is None or not re.match(NAME_PATTERN, name)):
        raise ValueError(
            f"tinylm path must be {IN_PROCESS_PATH} or {PATH_PREFIX}<name> of a declared preprocessor, "
            f"got {cfg['path']!r}"
        )
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
    loader = loader_settings(cfg["loader"])
    out: dict[str, Any] = {}

    from gcbench.workloads import tinylm_data

    if cfg["path"] == IN_PROCESS_PATH:
        encoder = tokenizer.Encoder(merges)
        plan = tinylm_data.ChunkPlan.make(corpus, encoder)  # encodes the corpus once: warms the encoder
        ctx.log(f"planned {plan.n_ids} ids of the corpus in {plan.seconds:.2f} s (encoder warmed)")
        source: Any = tinylm_data.TextBatches(corpus, plan, merges, cfg["tokenizer"], B, T, encoder=encoder)
    else:
        from gcbench.tokenizer import preprocessors

        entry = preprocessor_entry(spec, cfg["path"])
        binary, record = tokenizer_binary(cfg, entry)
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
            raw = preprocessors.tokenize(
                entry, binary, merges_path, in_path, tok_path, float(cfg["tokenize_timeout_s"])
            )
            tokenize_s = time.monotonic() - t0
        if raw != tok_path:  # output: ids, converted outside the window
            preprocessors.convert_ids(raw, tok_path, merges)
            raw.unlink(missing_ok=True)
        ids = tokenizer.read_tokens(tok_path, merges)
        source = tinylm_data.TokenFileBatches(tok_path, merges, B, T, ids=ids)
        out.update(
            {
                "tokenize_duration_s": tokenize_s,
                "tokenize_tokens": int(len(ids)),
                "tokenizer_impl": entry["name"],
                "tokenizer_bin": str(binary),
                "preprocessor": {k: v for k, v in record.items() if k != "binary"},
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
    pin = loader["pin_memory"] and on_cuda
    if loader["pin_memory"] and not on_cuda:
        not_in_effect["loader"] = PIN_ON_CPU
    batches = tinylm_data.OrderedBatches(source, loader["workers"], loader["prefetch"], pin)
    tally = {"encoded": 0, "misses": 0, "misses_known": True, "busy_s": 0.0}

    def step(_: int) -> None:
        ids, encoded, misses = batches.next()
        tally["encoded"] += encoded
        if misses is None:
            tally["misses_known"] = False
        else:
            tally["misses"] += misses
        t0 = time.perf_counter()
        batch = ids.to(dev, non_blocking=pin)
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
        # the device's own work (copy and model): on the CPU it runs as the host waits
        tally["busy_s"] += time.perf_counter() - t0

    try:
        batches.prime()  # every worker has warmed its encoder and delivered its first batch
        run_steps(spec.warmup, step, default_steps=0)
        if sync is not None:
            sync()
        # every repetition's window reads the token stream from its start, however many steps the warm-up took
        batches.close()
        batches = tinylm_data.OrderedBatches(source, loader["workers"], loader["prefetch"], pin)
        batches.prime()
        loss_sum.zero_()
        tally.update(encoded=0, misses=0, misses_known=True, busy_s=0.0)
        with ctx.window():
            # No per-step synchronisation: host-side batch making overlaps queued GPU work,
            # which is the point of the regime comparison; one sync closes the window.
            steps = run_steps(spec.window, step, default_steps=10)
            if sync is not None:
                sync()
    finally:
        batches.close()
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
            "tokenized_in_window_tokens": tally["encoded"],
            "encoder_cache_misses_in_window": tally["misses"]
            if cfg["path"] == IN_PROCESS_PATH and tally["misses_known"]
            else None,
            "encoder_warm": batches.warm if cfg["path"] == IN_PROCESS_PATH else None,
            "loader_workers": loader["workers"],
            "tokenizer": cfg["tokenizer"] if cfg["path"] == IN_PROCESS_PATH else None,
            # the trial's own busy time (the simulated device's busy share): host-timed work is device work on a CPU
            "device_busy_s": tally["busy_s"] if kind == "cpu" else None,
            **effective(
                cfg,
                {
                    **({"precision": precision_effective} if precision_effective != precision else {}),
                    "loader": {**loader, "pin_memory": pin},
                },
                not_in_effect,
            ),
        }
    )
    if cfg["path"] != IN_PROCESS_PATH:
        del source, batches, ids
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
    preprocessor_setting="path",
)
"""The kind's registration (entry point ``tinylm`` of group ``gcbench.workloads``)."""
