"""Tokenizer throughput, one thread, with the same merges: Python reference, Go, Rust,
tiktoken and Hugging Face ``tokenizers`` (the anchors).

    python benchmarks/tokenizer_throughput.py [--vocab-size 4096] [--repeat 5] [--long-mb 4] [--json]

Two inputs: the default corpus (Python's ``pydoc_data.topics``, ~466 kB of prose) and
a long run, ``--long-mb`` MB of one repeated space (a single pre-token of that length,
the worst case of a naive merge loop). Each figure is MB/s (1e6 bytes/s) of encoding
only: the input is in memory, files, process start-up and building the encoder are
excluded; each repetition starts with an empty chunk cache (a fresh encoder, Encoding
or ``Tokenizer``), and the fastest of ``--repeat`` is kept. Go runs with GOMAXPROCS=1;
``tokenizers`` with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false, tiktoken's
``encode_ordinary`` on one text is single-threaded.

The anchors in their fastest configuration for our byte-level BPE:

* tiktoken: ``tiktoken.Encoding`` with our ids as mergeable ranks and our
  pre-tokenizer as ``pat_str`` (:mod:`gcbench.tokenizer.tiktoken_encoding`);
* tokenizers: every layout of :func:`gcbench.tokenizer.hf.hf_tokenizer` (byte mapping in
  the normalizer or in the pre-tokenizer), a word cache of 2**20, called with
  ``encode_batch_fast([text])`` (no offsets; tokenizers >= 0.21) and ``encode(text)``;
  the fastest combination is the anchor, and all are printed.

Every implementation's ids are compared with the reference's ("same ids"); a
difference prints how many ids differ. Targets (issue 15): Rust >= tiktoken, Go >= 0.5 x
tiktoken, on the corpus. The anchors need the ``bench`` extra (``make bench`` installs
it); without them their rows are missing and say why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

TARGETS = {"rust": 1.0, "go": 0.5}
"""Minimum throughput ratio against tiktoken, on the corpus."""
ORDER = ("python", "tokenizers", "tiktoken", "go", "rust")


def best_of(repeat: int, fn) -> tuple[float, object]:
    """Fastest wall time (s) of ``repeat`` calls of ``fn() -> (seconds, result)``."""
    best, result = float("inf"), None
    for _ in range(repeat):
        seconds, result = fn()
        best = min(best, seconds)
    return best, result


def timed(make, encode):
    """``fn`` for :func:`best_of`: build with ``make()`` (untimed), time ``encode(obj)``."""

    def once():
        obj = make()
        t = time.perf_counter()
        ids = encode(obj)
        return time.perf_counter() - t, ids

    return once


def id_check(ids, reference) -> tuple[bool, int]:
    """(identical, number of positions that differ, counting a length difference)."""
    ids = list(ids)
    if ids == reference:
        return True, 0
    differ = sum(1 for a, b in zip(ids, reference, strict=False) if a != b) + abs(len(ids) - len(reference))
    return False, differ


def measure(
    name: str, data: bytes, merges, args, tmp: Path, notes: list[str], hf_configs: list[str] | None = None
) -> dict[str, dict]:
    """Encode ``data`` with every implementation; {impl: {encode_s, tokens, same_ids, ...}}.

    ``hf_configs``: the ``layout+call`` combinations of tokenizers to try (None: all).
    """
    from gcbench.tokenizer import Encoder, read_tokens
    from gcbench.tokenizer.native import run_native
    from gcbench.tokenizer.preprocessors import build_local, builtin

    results: dict[str, dict] = {}

    def record(impl, secs, ids, **extra):
        same, differ = id_check(ids, reference)
        results[impl] = {"encode_s": secs, "tokens": len(ids), "same_ids": same, "ids_differing": differ, **extra}

    reference = None
    secs, reference = best_of(args.repeat, timed(lambda: Encoder(merges), lambda enc: enc.encode(data)))
    record("python", secs, reference)

    text = data.decode("utf-8")
    try:
        from gcbench.tokenizer.tiktoken_encoding import tiktoken_encoding

        secs, ids = best_of(
            args.repeat, timed(lambda: tiktoken_encoding(merges), lambda enc: enc.encode_ordinary(text))
        )
        record("tiktoken", secs, ids)
    except ImportError:
        notes.append("tiktoken not installed (pip install -e .[bench]): no tiktoken row")
    except BaseException as exc:  # tiktoken's Rust panics arrive as pyo3's PanicException (a BaseException)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        notes.append(f"tiktoken failed on the {name}: {type(exc).__name__}: {str(exc)[-120:]}")

    try:
        from gcbench.tokenizer.hf import hf_tokenizer

        configs = {}
        for layout in ("normalizer", "pre_tokenizer"):
            calls = {"encode": lambda tok: tok.encode(text).ids}
            if hasattr(hf_tokenizer(merges, layout), "encode_batch_fast"):
                calls["encode_batch_fast"] = lambda tok: tok.encode_batch_fast([text])[0].ids
            for call, fn in calls.items():
                if hf_configs is not None and f"{layout}+{call}" not in hf_configs:
                    continue
                secs, ids = best_of(args.repeat, timed(lambda layout=layout: hf_tokenizer(merges, layout), fn))
                configs[f"{layout}+{call}"] = (secs, ids)
        fastest = min(configs, key=lambda c: configs[c][0])
        record(
            "tokenizers",
            configs[fastest][0],
            configs[fastest][1],
            config=fastest,
            configs={
                c: {"mb_per_s": len(data) / 1e6 / s, "same_ids": id_check(i, reference)[0]}
                for c, (s, i) in configs.items()
            },
        )
    except ImportError:
        notes.append("tokenizers not installed (pip install -e .[bench]): no tokenizers row")

    merges_path = merges.save(tmp / "merges.txt")
    corpus_path = tmp / f"{name.replace(' ', '_')}.txt"
    corpus_path.write_bytes(data)
    for impl in ("go", "rust"):
        binary = build_local(builtin()[impl], args.cache_dir)
        out = tmp / f"{name.replace(' ', '_')}-{impl}.tok"
        run = run_native(binary, merges_path, corpus_path, out, repeat=args.repeat, env={"GOMAXPROCS": "1"})
        record(impl, run.encode_s, read_tokens(out, merges).tolist(), wall_s=run.wall_s)

    for r in results.values():
        r["mb_per_s"] = len(data) / 1e6 / r["encode_s"]
    for anchor in ("tiktoken", "tokenizers"):
        base = results.get(anchor, {}).get("encode_s")
        for r in results.values():
            r[f"vs_{anchor}"] = base / r["encode_s"] if base else None
    return results


def print_table(title: str, data_bytes: int, results: dict[str, dict], targets: bool) -> None:
    print(f"\n{title}: {data_bytes:,} bytes\n")
    print(
        f"| {'impl':<10} | {'MB/s':>8} | {'tokens':>9} | {'x tiktoken':>10} | {'x tokenizers':>12} | same ids | target |"
    )
    print("|" + "|".join(["-" * 12, "-" * 10, "-" * 11, "-" * 12, "-" * 14, "-" * 10, "-" * 8]) + "|")
    for name in ORDER:
        if name not in results:
            continue
        r = results[name]
        ratios = [f"{r[k]:.2f}" if r[k] is not None else "-" for k in ("vs_tiktoken", "vs_tokenizers")]
        same = "yes" if r["same_ids"] else f"NO ({r['ids_differing']} differ)"
        target = ""
        if targets and name in TARGETS and r["vs_tiktoken"] is not None:
            target = f">= {TARGETS[name]:.1f}x tiktoken: {'met' if r['vs_tiktoken'] >= TARGETS[name] else 'NOT met'}"
        print(
            f"| {name:<10} | {r['mb_per_s']:>8.1f} | {r['tokens']:>9} | {ratios[0]:>10} | {ratios[1]:>12} | {same} | {target} |"
        )
    tok = results.get("tokenizers")
    if tok and len(tok["configs"]) > 1:
        tried = ", ".join(
            f"{c} {v['mb_per_s']:.1f} MB/s{'' if v['same_ids'] else ' (ids differ)'}" for c, v in tok["configs"].items()
        )
        print(f"\ntokenizers configurations (fastest is the row above): {tried}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab-size", type=int, default=4096, help="ids of the tokenizer trained on the corpus")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions per implementation (fastest kept)")
    ap.add_argument(
        "--long-mb", type=float, default=4.0, help="MB of one repeated space for the long-run input (0: skip)"
    )
    ap.add_argument("--cache-dir", type=Path, default=None, help="native binaries cache [$GCBENCH_HOME/tools]")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    args = ap.parse_args()

    from gcbench.tokenizer import default_corpus, train

    if args.cache_dir is None:
        from gcbench import config

        args.cache_dir = config.home() / "tools"
    corpus = default_corpus()
    t0 = time.perf_counter()
    merges = train(corpus, args.vocab_size)
    train_s = time.perf_counter() - t0
    inputs = {"corpus": corpus}
    if args.long_mb > 0:
        inputs["long_run"] = b" " * int(args.long_mb * 1e6)
    notes: list[str] = []
    measured = {}
    with tempfile.TemporaryDirectory() as tmp:
        measured["corpus"] = measure("corpus", corpus, merges, args, Path(tmp), notes)
        if "long_run" in inputs:  # tokenizers: the configuration fastest on the corpus only
            fastest = measured["corpus"].get("tokenizers", {}).get("config")
            measured["long_run"] = measure(
                "long run",
                inputs["long_run"],
                merges,
                args,
                Path(tmp),
                notes,
                hf_configs=[fastest] if fastest else None,
            )
    notes = list(dict.fromkeys(notes))
    if args.json:
        print(
            json.dumps(
                {
                    "corpus_bytes": len(corpus),
                    "vocab_size": merges.vocab_size,
                    "train_s": train_s,
                    "repeat": args.repeat,
                    "notes": notes,
                    "inputs": {n: {"bytes": len(inputs[n]), "results": r} for n, r in measured.items()},
                },
                indent=2,
            )
        )
        return

    print(
        f"vocab {merges.vocab_size} trained on the corpus in {train_s:.2f} s; one thread; "
        f"fastest of {args.repeat}; MB/s of encoding only"
    )
    for note in notes:
        print(f"note: {note}")
    print_table("corpus (pydoc_data.topics)", len(corpus), measured["corpus"], targets=True)
    if "long_run" in measured:
        print_table(
            "long run (one repeated space, a single pre-token)",
            len(inputs["long_run"]),
            measured["long_run"],
            targets=False,
        )


if __name__ == "__main__":
    main()
