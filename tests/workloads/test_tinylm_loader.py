"""TinyLM's input pipeline: the same ids in the same order for every worker count and
both in-process encoders, a warmed encoder when the window opens, and plan errors that
name the field and its line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gcbench.errors import PlanError
from gcbench.plan import load_plan
from gcbench.spec import Amount
from gcbench.tokenizer import Encoder, default_corpus, pretokenize, train
from gcbench.tokenizer.bpe import CACHE_MAX_CHUNK
from gcbench.workloads import tinylm, tinylm_data

TINY = {"layers": 1, "d_model": 64, "heads": 2, "context_length": 32, "batch_size": 4, "vocab_size": 512}
B, T = 5, 24
N_BATCHES = 12


@pytest.fixture(scope="module")
def merges():
    return train(default_corpus(), 512)


@pytest.fixture(scope="module")
def whole_ids(merges):
    """The stream as the token file holds it: the whole corpus encoded at once."""
    return np.asarray(Encoder(merges).encode(default_corpus()), dtype=np.int64)


def expected_batch(ids: np.ndarray, i: int) -> np.ndarray:
    starts = tinylm_data.sequence_starts(i, B, T, len(ids))
    return np.stack([ids[s : s + T + 1] for s in starts])


def text_source(merges, tokenizer: str = "reference", corpus: bytes | None = None):
    corpus = default_corpus() if corpus is None else corpus
    encoder = Encoder(merges)
    plan = tinylm_data.ChunkPlan.make(corpus, encoder)
    return tinylm_data.TextBatches(corpus, plan, merges, tokenizer, B, T, encoder=encoder)


def first_batches(source, workers: int, n: int = N_BATCHES) -> list[np.ndarray]:
    batches = tinylm_data.OrderedBatches(source, workers, prefetch=2, pin_memory=False)
    try:
        batches.prime()
        return [batches.next()[0].numpy().copy() for _ in range(n)]
    finally:
        batches.close()


def test_sequences_advance_by_the_context_and_wrap_where_the_next_would_pass_the_end():
    # 90 ids, T = 24: sequences start at 0, 24, 48 (48 + 25 <= 90), then 72 + 25 > 90 wraps
    starts = [int(s) for i in range(3) for s in tinylm_data.sequence_starts(i, 2, 24, 90)]
    assert starts == [0, 24, 48, 0, 24, 48]


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_torch_path_ids_are_the_token_files_for_every_worker_count(merges, whole_ids, workers):
    got = first_batches(text_source(merges), workers)
    # batch i is the same ids in the same order as the external paths read from their token file
    for i, batch in enumerate(got):
        np.testing.assert_array_equal(batch, expected_batch(whole_ids, i), err_msg=f"batch {i}, {workers} workers")


def test_the_order_is_exact_past_the_wrap_with_three_workers(merges, whole_ids):
    # a short corpus: the stream wraps several times within the batches read
    corpus = default_corpus()[:6000]
    source = text_source(merges, corpus=corpus)
    ids = np.asarray(Encoder(merges).encode(corpus), dtype=np.int64)
    per_lap = (len(ids) - T - 1) // T + 1
    n = 2 * per_lap // B + 3
    got = first_batches(source, 3, n)
    for i, batch in enumerate(got):
        np.testing.assert_array_equal(batch, expected_batch(ids, i))


def test_hf_tokenizer_gives_the_reference_ids_in_workers(merges, whole_ids):
    pytest.importorskip("tokenizers")
    sync = first_batches(text_source(merges, "hf"), 0)
    two = first_batches(text_source(merges, "hf"), 2)
    for i in range(N_BATCHES):
        np.testing.assert_array_equal(sync[i], expected_batch(whole_ids, i))
        np.testing.assert_array_equal(two[i], sync[i])


def test_token_file_batches_match_in_workers(merges, whole_ids, tmp_path):
    from gcbench.tokenizer import write_tokens

    write_tokens(tmp_path / "c.tok", whole_ids.tolist(), merges)
    source = tinylm_data.TokenFileBatches(tmp_path / "c.tok", merges, B, T)
    for i, batch in enumerate(first_batches(source, 2)):
        np.testing.assert_array_equal(batch, expected_batch(whole_ids, i))


def test_hf_needs_valid_utf8(merges):
    pytest.importorskip("tokenizers")
    with pytest.raises(ValueError, match="valid UTF-8"):
        text_source(merges, "hf", corpus=default_corpus()[:4000] + b"\xff\xfe more text " * 50)


# ----------------------------------------------------------------------------- the warmed encoder


def test_the_plan_warms_the_encoder_with_every_chunk_of_the_corpus(merges):
    source = text_source(merges)
    corpus = default_corpus()
    cacheable = {c for c in pretokenize(corpus) if len(c) <= CACHE_MAX_CHUNK and len(c) > 0}
    assert source.codec.cache_entries == len(cacheable)
    work = (source.codec.encoder.work.scan_steps, source.codec.encoder.work.heap_steps)
    misses = [source.batch(i)[2] for i in range(40)]
    # no batch merged anything: every chunk came from the cache
    assert misses == [0] * 40
    assert (source.codec.encoder.work.scan_steps, source.codec.encoder.work.heap_steps) == work


def test_a_cold_encoder_would_miss_in_the_window(merges):
    """The same count is non-zero for an encoder that was not warmed: the check can fail."""
    corpus = default_corpus()
    plan = tinylm_data.ChunkPlan.make(corpus, Encoder(merges))
    cold = tinylm_data.TextBatches(corpus, plan, merges, "reference", B, T)
    cold.codec = tinylm_data.ReferenceCodec(Encoder(merges))
    cold.warm = {"tokenizer": "reference", "warmed_bytes": 0, "seconds": 0.0, "cache_entries": 0}
    assert cold.batch(0)[2] > 0


def test_each_worker_warms_its_hf_encoder_before_the_first_batch(merges):
    pytest.importorskip("tokenizers")
    batches = tinylm_data.OrderedBatches(text_source(merges, "hf"), 2, prefetch=2, pin_memory=False)
    try:
        batches.prime()
        assert sorted(w["worker"] for w in batches.warm) == [0, 1]
        assert all(w["tokenizer"] == "hf" and w["warmed_bytes"] == len(default_corpus()) for w in batches.warm)
    finally:
        batches.close()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tinylm-loader-cache")


def test_trial_with_workers_sees_the_synchronous_loops_stream_warm(context, make_spec, cache):
    settings = {**TINY, "cache_dir": str(cache)}
    sync_spec = make_spec("tinylm", settings, window=Amount(steps=8), warmup=Amount(steps=1))
    sync = tinylm.run(sync_spec, context(sync_spec))
    spec = make_spec(
        "tinylm",
        {**settings, "loader": {"workers": 2, "prefetch": 3}},
        window=Amount(steps=8),
        warmup=Amount(steps=1),
    )
    out = tinylm.run(spec, context(spec))
    assert out["loader_workers"] == 2 and sync["loader_workers"] == 0
    # the same ids reach the same model: the same losses
    assert out["loss_mean"] == pytest.approx(sync["loss_mean"], rel=1e-9)
    assert out["tokenized_in_window_tokens"] == sync["tokenized_in_window_tokens"] > 8 * 4 * 32
    # both encoders in steady state in the window: nothing merged, everything from the cache
    assert out["encoder_cache_misses_in_window"] == sync["encoder_cache_misses_in_window"] == 0
    assert sorted(w["worker"] for w in out["encoder_warm"]) == [0, 1]
    assert sync["encoder_warm"][0]["worker"] is None and sync["encoder_warm"][0]["cache_entries"] > 1000
    # no CUDA here: no pinning, and the trial says so
    assert out["settings_effective"]["loader"] == {"workers": 2, "prefetch": 3, "pin_memory": False}
    assert out["settings_not_in_effect"] == {"loader": tinylm.PIN_ON_CPU}
    assert sync["settings_not_in_effect"] == {}
    assert 0 < out["device_busy_s"] and math.isfinite(out["device_busy_s"])


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        ({"workers": 0}, {"workers": 0, "prefetch": 2, "pin_memory": False}),
        (4, {"workers": 4, "prefetch": 2, "pin_memory": True}),
        ({"workers": 2, "pin_memory": False}, {"workers": 2, "prefetch": 2, "pin_memory": False}),
    ],
)
def test_loader_settings(value, expected):
    if expected is None:
        with pytest.raises(ValueError, match="mapping"):
            tinylm.loader_settings(value)
    else:
        assert tinylm.loader_settings(value) == expected


PLAN = """\
name: loaders
window: {steps: 2}
workloads:
  - name: lm
    kind: tinylm
    settings:
      path: torch
      loader:
        workers: 2
        prefetch: 2
      tokenizer: reference
"""


@pytest.mark.parametrize(
    "old, new, line, field, message",
    [
        ("workers: 2", "workers: -1", 9, "workloads[0].settings.loader.workers", "integer >= 0"),
        ("prefetch: 2", "prefetch: 0", 10, "workloads[0].settings.loader.prefetch", "integer >= 1"),
        ("prefetch: 2", "prefetchh: 2", 10, "workloads[0].settings.loader.prefetchh", "unknown tinylm loader field"),
        (
            "workers: 2",
            "workers: 0\n        pin_memory: true",
            10,
            "workloads[0].settings.loader.pin_memory",
            "needs workers >= 1",
        ),
        ("tokenizer: reference", "tokenizer: tiktoken", 11, "workloads[0].settings.tokenizer", "reference, hf"),
    ],
)
def test_bad_loader_or_tokenizer_names_file_line_and_field(tmp_path, old, new, line, field, message):
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.replace(old, new))
    with pytest.raises(PlanError) as info:
        load_plan(path)
    err = info.value
    assert (err.line, err.field) == (line, field) and message in err.message
    assert str(err).startswith(f"{path}:{line}: {field}:")


def test_hf_without_tokenizers_installed_is_a_plan_error(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tokenizers" else real(name, *a))
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.replace("tokenizer: reference", "tokenizer: hf"))
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert (info.value.line, info.value.field) == (11, "workloads[0].settings.tokenizer")
    assert "pip install -e .[bench]" in info.value.message
