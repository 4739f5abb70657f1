"""Tokenizer throughput, one thread, on the default corpus: Python reference, Go, Rust
and Hugging Face ``tokenizers`` (the anchor) with the same merges.

    python benchmarks/tokenizer_throughput.py [--vocab-size 4096] [--repeat 5] [--json]

Each figure is MB/s (1e6 bytes/s) of encoding only: the corpus is in memory, files and
process start-up are excluded; each repetition starts with an empty chunk cache (a
fresh encoder or ``Tokenizer``), and the fastest of ``--repeat`` is kept. Go runs with
GOMAXPROCS=1, ``tokenizers`` with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false
(one ``encode`` call on the whole text is sequential anyway). Every implementation's
ids are compared with the reference's. Targets (issue 4): Rust >= tokenizers, Go >=
0.7 x tokenizers.
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

TARGETS = {"rust": 1.0, "go": 0.7}
"""Minimum throughput ratio against tokenizers."""


def best_of(repeat: int, fn) -> tuple[float, object]:
    """Fastest wall time (s) of ``repeat`` calls of ``fn() -> (seconds, result)``."""
    best, result = float("inf"), None
    for _ in range(repeat):
        seconds, result = fn()
        best = min(best, seconds)
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab-size", type=int, default=4096, help="ids of the tokenizer trained on the corpus")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions per implementation (fastest kept)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="native binaries cache [$GCBENCH_HOME/tools]")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args()

    from gcbench.factory.tokenizers import build_local
    from gcbench.tokenizer import Encoder, default_corpus, read_tokens, train
    from gcbench.tokenizer.native import run_native

    corpus = default_corpus()
    t0 = time.perf_counter()
    merges = train(corpus, args.vocab_size)
    train_s = time.perf_counter() - t0

    def python_once():
        enc = Encoder(merges)
        t = time.perf_counter()
        ids = enc.encode(corpus)
        return time.perf_counter() - t, ids

    results: dict[str, dict] = {}
    secs, reference = best_of(args.repeat, python_once)
    results["python"] = {"encode_s": secs, "tokens": len(reference), "same_ids": True}

    try:
        from gcbench.tokenizer.hf import hf_tokenizer

        text = corpus.decode("utf-8")

        def hf_once():
            tok = hf_tokenizer(merges)
            t = time.perf_counter()
            ids = tok.encode(text).ids
            return time.perf_counter() - t, ids

        secs, ids = best_of(args.repeat, hf_once)
        results["tokenizers"] = {"encode_s": secs, "tokens": len(ids), "same_ids": ids == reference}
    except ImportError:
        print("tokenizers not installed (pip install -e .[bench]): no anchor", file=sys.stderr)

    if args.cache_dir is None:
        from gcbench import config

        args.cache_dir = config.home() / "tools"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        merges_path = merges.save(tmp / "merges.txt")
        corpus_path = tmp / "corpus.txt"
        corpus_path.write_bytes(corpus)
        for impl in ("go", "rust"):
            binary = build_local(impl, args.cache_dir)
            out = tmp / f"{impl}.tok"
            run = run_native(binary, merges_path, corpus_path, out, repeat=args.repeat, env={"GOMAXPROCS": "1"})
            ids = read_tokens(out, merges)
            results[impl] = {"encode_s": run.encode_s, "tokens": run.tokens, "wall_s": run.wall_s,
                             "same_ids": ids.tolist() == reference}

    anchor = results.get("tokenizers", {}).get("encode_s")
    for name, r in results.items():
        r["mb_per_s"] = len(corpus) / 1e6 / r["encode_s"]
        r["vs_tokenizers"] = anchor / r["encode_s"] if anchor else None
    summary = {"corpus_bytes": len(corpus), "vocab_size": merges.vocab_size, "train_s": train_s,
               "repeat": args.repeat, "results": results}
    if args.json:
        print(json.dumps(summary, indent=2))
        return

    print(f"corpus: pydoc_data.topics, {len(corpus):,} bytes; vocab {merges.vocab_size} "
          f"(trained in {train_s:.2f} s); one thread; fastest of {args.repeat}")
    print(f"{'impl':<11} {'MB/s':>8} {'tokens':>8} {'x tokenizers':>13} {'same ids':>9}  target")
    for name in ("python", "tokenizers", "go", "rust"):
        if name not in results:
            continue
        r = results[name]
        ratio = f"{r['vs_tokenizers']:.2f}" if r["vs_tokenizers"] is not None else "-"
        target = ""
        if name in TARGETS and r["vs_tokenizers"] is not None:
            ok = r["vs_tokenizers"] >= TARGETS[name]
            target = f">= {TARGETS[name]:.1f}x: {'met' if ok else 'NOT met'}"
        print(f"{name:<11} {r['mb_per_s']:>8.1f} {r['tokens']:>8} {ratio:>13} {'yes' if r['same_ids'] else 'NO':>9}  {target}")


if __name__ == "__main__":
    main()
