"""TinyLM on the three preprocessing paths, for real on CPU with a tiny model."""

import math
import shutil
import sys
from pathlib import Path

import pytest

from gcbench.spec import Amount
from gcbench.tokenizer import Encoder, Merges, default_corpus, train
from gcbench.workloads import tinylm

PLUGINS = Path(__import__("gcbench").__file__).resolve().parent.parent

TINY = {"layers": 1, "d_model": 64, "heads": 2, "context_length": 32, "batch_size": 4, "vocab_size": 512}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A merges cache shared by the module's tests (the default corpus is trained once)."""
    return tmp_path_factory.mktemp("tinylm-cache")


def fake_native_tokenizer(folder: Path, *, exit_status: int = 0, merges_override: Path | None = None) -> Path:
    """An executable with the native tokenizers' CLI (--merges M --in CORPUS --out TOKENS),
    implemented with the reference encoder: the external path runs without Go or Rust."""
    script = folder / "fake-tok"
    script.write_text(
        f"#!{sys.executable}\n"
        "import argparse, sys\n"
        f"sys.path.insert(0, {str(PLUGINS)!r})\n"
        "from gcbench.tokenizer import Merges, Encoder, write_tokens\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--merges'); p.add_argument('--in', dest='inp'); p.add_argument('--out')\n"
        "a = p.parse_args()\n"
        f"if {exit_status}: sys.stderr.write('cannot read corpus\\n'); sys.exit({exit_status})\n"
        f"m = Merges.load({str(merges_override)!r} if {merges_override is not None} else a.merges)\n"
        "write_tokens(a.out, Encoder(m).encode(open(a.inp, 'rb').read()), m)\n"
    )
    script.chmod(0o755)
    return script


def test_torch_path_inference_tokenizes_inside_the_window(context, make_spec, cache):
    spec = make_spec("tinylm", {**TINY, "cache_dir": str(cache)}, window=Amount(steps=10), warmup=Amount(steps=2))
    ctx = context(spec)
    out = tinylm.run(spec, ctx)
    assert ctx.order == ["main"]
    assert (out["tokens"], out["steps"], out["sequences"]) == (10 * 4 * 32, 10, 40)
    assert out["path"] == "torch" and out["mode"] == "infer" and out["device_kind"] == "cpu"
    # the encoder ran in the window for about the tokens the window consumed
    assert 0.9 * out["tokens"] <= out["tokenized_in_window_tokens"] <= 1.2 * out["tokens"]
    # an untrained model predicts nearly uniformly: cross-entropy ~ ln(V)
    assert out["vocab_size"] == 512
    assert out["loss_mean"] == pytest.approx(math.log(512), abs=0.05)
    assert out["parameters"] == 512 * 64 + 32 * 64 + (12 * 64 * 64 + 13 * 64) + 2 * 64
    assert out["corpus_bytes"] == len(default_corpus())
    assert "tokenize_duration_s" not in out


def test_training_lowers_the_loss(context, make_spec, cache):
    spec = make_spec("tinylm", {**TINY, "cache_dir": str(cache), "mode": "train", "lr": 3e-3}, window=Amount(steps=25))
    out = tinylm.run(spec, context(spec))
    assert out["mode"] == "train"
    assert out["loss"] < math.log(512) - 0.3


def test_external_path_tokenizes_in_its_own_window_and_sees_the_same_tokens(context, make_spec, cache, tmp_path):
    settings = {**TINY, "cache_dir": str(cache)}
    torch_spec = make_spec("tinylm", settings, window=Amount(steps=6))
    torch_out = tinylm.run(torch_spec, context(torch_spec))

    binary = fake_native_tokenizer(tmp_path)
    spec = make_spec(
        "tinylm", {**settings, "path": "external-rust", "tokenizer_bin": str(binary)}, window=Amount(steps=6)
    )
    ctx = context(spec)
    out = tinylm.run(spec, ctx)
    assert ctx.order == ["tokenize", "main"]
    assert ctx.windows["tokenize"][1] <= ctx.windows["main"][0]
    assert out["tokenize_duration_s"] == pytest.approx(ctx.duration("tokenize"), abs=0.05)
    merges = Merges.load(next(cache.glob("merges-*-512.txt")))
    assert out["tokenize_tokens"] == len(Encoder(merges).encode(default_corpus()))
    assert out["tokenizer_impl"] == "rust" and out["tokenized_in_window_tokens"] == 0
    # the same token stream reaches the model on both paths
    assert out["loss_mean"] == pytest.approx(torch_out["loss_mean"], rel=1e-6)
    assert out["merges_sha256"] == torch_out["merges_sha256"] == merges.sha256
    assert not (ctx.outdir / "corpus.tok").exists()  # the token file does not stay behind


def test_merges_are_trained_once_and_cached(context, make_spec, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Ünïcode text, energy per token. " * 200 + "\n", encoding="utf-8")
    settings = {
        **TINY,
        "vocab_size": 300,
        "context_length": 16,
        "cache_dir": str(tmp_path / "c"),
        "corpus": str(corpus),
    }
    spec = make_spec("tinylm", settings, window=Amount(steps=2))
    first = tinylm.run(spec, context(spec))
    cached = list((tmp_path / "c").glob("merges-*-300.txt"))
    assert len(cached) == 1
    mtime = cached[0].stat().st_mtime_ns
    second = tinylm.run(spec, context(spec))
    assert cached[0].stat().st_mtime_ns == mtime
    assert first["merges_sha256"] == second["merges_sha256"] == Merges.load(cached[0]).sha256
    assert first["corpus_bytes"] == corpus.stat().st_size


def test_given_merges_file_is_used(context, make_spec, tmp_path):
    merges = train(b"abc abd abe " * 300, 270)
    path = merges.save(tmp_path / "m.txt")
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"abc abd abe " * 300)
    spec = make_spec(
        "tinylm",
        {**TINY, "context_length": 8, "merges": str(path), "corpus": str(corpus), "cache_dir": str(tmp_path / "c")},
    )
    out = tinylm.run(spec, context(spec))
    assert out["merges_sha256"] == merges.sha256 and out["vocab_size"] == merges.vocab_size


def test_seconds_window_runs_whole_steps(context, make_spec, cache):
    spec = make_spec("tinylm", {**TINY, "cache_dir": str(cache)}, window=Amount(seconds=0.3))
    ctx = context(spec)
    out = tinylm.run(spec, ctx)
    assert ctx.duration() >= 0.3
    assert out["steps"] >= 1 and out["tokens"] == out["steps"] * 4 * 32


@pytest.mark.parametrize("precision, effective", [("amp", "amp-bf16-cpu"), ("bf16", "bf16-cpu")])
def test_reduced_precision_on_cpu_says_what_ran(context, make_spec, cache, precision, effective):
    spec = make_spec(
        "tinylm", {**TINY, "cache_dir": str(cache), "precision": precision, "mode": "train"}, window=Amount(steps=2)
    )
    out = tinylm.run(spec, context(spec))
    assert out["precision_effective"] == effective and math.isfinite(out["loss"])
    assert out["settings_effective"]["precision"] == effective
    if precision == "amp":  # bfloat16 autocast on the CPU is not the float16 AMP a GPU runs
        assert out["settings_not_in_effect"] == {
            "precision": "no CUDA device: float16 AMP unavailable, bfloat16 autocast on the CPU instead (amp-bf16-cpu)"
        }
    else:  # the weights really are bfloat16
        assert out["settings_not_in_effect"] == {}


def test_failing_native_tokenizer_is_skipped_with_its_stderr_before_anything_is_measured(
    context, make_spec, cache, tmp_path, monkeypatch
):
    from gcbench.errors import SkipTrial

    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    binary = fake_native_tokenizer(tmp_path, exit_status=3)
    spec = make_spec("tinylm", {**TINY, "cache_dir": str(cache), "path": "external-go", "tokenizer_bin": str(binary)})
    ctx = context(spec)
    with pytest.raises(
        SkipTrial,
        match=rf"tokenizer_bin {binary} \(go\): conformance check failed: go exited with status 3: cannot read corpus",
    ):
        tinylm.run(spec, ctx)
    assert ctx.order == []  # no window opened


def test_a_tokenizer_bin_with_other_ids_is_skipped_not_measured(context, make_spec, cache, tmp_path, monkeypatch):
    """A binary given by hand is proven like a build: one tokenizing with other merges is
    skipped before the trial measures anything (before, it ran "not checked" and only the
    trial's own read of its token file could refuse it, after the tokenize window)."""
    from gcbench.errors import SkipTrial

    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    other = train(default_corpus()[:20000], 300).save(tmp_path / "other.txt")
    binary = fake_native_tokenizer(tmp_path, merges_override=other)
    spec = make_spec("tinylm", {**TINY, "cache_dir": str(cache), "path": "external-go", "tokenizer_bin": str(binary)})
    ctx = context(spec)
    with pytest.raises(
        SkipTrial, match=r"\(go\): conformance check failed: made with merges sha256 [0-9a-f]{16}\.\.\., not with"
    ):
        tinylm.run(spec, ctx)
    assert ctx.order == []


def test_a_conformant_tokenizer_bin_is_recorded_as_checked_and_checked_once(
    context, make_spec, cache, tmp_path, monkeypatch
):
    from gcbench.tokenizer import preprocessors

    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    binary = fake_native_tokenizer(tmp_path)
    spec = make_spec(
        "tinylm",
        {**TINY, "cache_dir": str(cache), "path": "external-go", "tokenizer_bin": str(binary)},
        window=Amount(steps=2),
    )
    out = tinylm.run(spec, context(spec))
    record = out["preprocessor"]
    assert record["builder"] == "tokenizer_bin setting" and record["binary_sha256"] == preprocessors.sha256_of(binary)
    assert record["conformance"]["passed"] is True and record["conformance"]["inputs"] == 7
    calls = []
    monkeypatch.setattr(preprocessors, "check_conformance", lambda *a: calls.append(a) or {"passed": True})
    again = tinylm.run(spec, context(spec))
    assert calls == [] and again["preprocessor"]["conformance"] == record["conformance"]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"path": "external-java"}, "carries no declaration of preprocessor 'java'"),
        ({"path": "external-"}, "must be torch or external-<name> of a declared preprocessor"),
        ({"precision": "fp8"}, "fp32, bf16 or amp"),
        ({"d_model": 65}, "multiple of heads"),
    ],
)
def test_bad_settings_are_refused(context, make_spec, settings, message):
    spec = make_spec("tinylm", {**TINY, **settings})
    with pytest.raises(ValueError, match=message):
        tinylm.run(spec, context(spec))


@pytest.mark.slow
@pytest.mark.parametrize("impl, tool", [("go", "go"), ("rust", "cargo")])
def test_real_native_tokenizer_path(context, make_spec, cache, tmp_path, impl, tool):
    from gcbench.tokenizer.preprocessors import build_local, builtin

    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed")
    binary = build_local(builtin()[impl], tmp_path / "tools")
    spec = make_spec(
        "tinylm",
        {**TINY, "cache_dir": str(cache), "path": f"external-{impl}", "tokenizer_bin": str(binary)},
        window=Amount(steps=3),
    )
    out = tinylm.run(spec, context(spec))
    merges = Merges.load(next(cache.glob("merges-*-512.txt")))
    assert out["tokenize_tokens"] == len(Encoder(merges).encode(default_corpus()))


def test_a_preprocessor_version_nobody_built_is_skipped_not_measured(context, make_spec, cache, tmp_path, monkeypatch):
    from gcbench.errors import SkipTrial

    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    spec = make_spec("tinylm", {**TINY, "cache_dir": str(cache), "path": "external-c"}).model_copy(
        update={
            "preprocessor": {
                "name": "c",
                "source_sha256": "0" * 64,
                "run": ["{binary}", "{in}", "{out}"],
                "output": "ids",
            }
        }
    )
    with pytest.raises(SkipTrial, match=r"preprocessor c version 000000000000 is not built"):
        tinylm.run(spec, context(spec))


@pytest.mark.parametrize("path", ["torch", "external"])
def test_every_repetition_reads_the_stream_from_its_start_whatever_the_warmup(
    context, make_spec, cache, tmp_path, path
):
    # inference does not change the model: the same seed and the same batches give the same loss
    settings = {**TINY, "cache_dir": str(cache)}
    if path == "external":
        settings.update(path="external-go", tokenizer_bin=str(fake_native_tokenizer(tmp_path)))
    losses = []
    for steps in (0, 3, 7):
        spec = make_spec("tinylm", settings, window=Amount(steps=4), warmup=Amount(steps=steps))
        losses.append(tinylm.run(spec, context(spec))["loss_mean"])
    assert losses[0] == losses[1] == losses[2]


def test_the_encoder_cache_is_warm_when_the_window_opens(context, make_spec, cache):
    spec = make_spec("tinylm", {**TINY, "cache_dir": str(cache)}, window=Amount(steps=6), warmup=Amount(steps=0))
    out = tinylm.run(spec, context(spec))
    # every chunk of the window was in the cache: no BPE merge ran inside the window
    assert out["tokenized_in_window_tokens"] > 0
    assert out["encoder_cache_misses_in_window"] == 0
