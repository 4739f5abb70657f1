"""A third-party GC-Bench workload kind: prefill and decode of a Hugging Face causal LM.

The model is GPT-2's architecture built from a small config with random weights
(``transformers.GPT2Config`` -> ``GPT2LMHeadModel``), so nothing is downloaded. One
trial measures, inside its ``main`` window, two named windows:

* ``prefill``: forward passes over a batch of prompts (``batch_size`` x
  ``prompt_tokens``), repeated for the window's length; counts the prompt tokens;
* ``decode``: greedy generation one token per step with the KV cache, restarted from
  the prompt whenever ``new_tokens`` are generated; counts the generated tokens.

GC-Bench turns them into ``prefill_j_per_token``, ``decode_j_per_token``,
``prefill_tokens_per_s`` and ``decode_tokens_per_s`` (and the main window's J/token),
with the same rules and statistics as its own workloads. Each window lasts the plan's
``window: {seconds: S}`` (default 1.5 s: at least 10 sensor periods).

This package registers the kind through the ``gcbench.workloads`` entry point of its
pyproject.toml; see docs/your-own-workload.md in GC-Bench.
"""

from __future__ import annotations

import time
from typing import Any

from gcbench.kinds import WorkloadKind
from gcbench.workloads import effective, settings

DEFAULTS: dict[str, Any] = {
    "n_layer": 2,
    "n_embd": 128,
    "n_head": 4,
    "vocab_size": 1024,
    "batch_size": 4,
    "prompt_tokens": 64,
    "new_tokens": 32,
    "threads": 1,
}


def check_settings(cfg: dict[str, Any]) -> None:
    """Raise ValueError on sizes that cannot build the model."""
    for key in ("n_layer", "n_embd", "n_head", "vocab_size", "batch_size", "prompt_tokens", "new_tokens", "threads"):
        if int(cfg[key]) < 1:
            raise ValueError(f"hf_causal_lm {key} must be >= 1, got {cfg[key]}")
    if int(cfg["n_embd"]) % int(cfg["n_head"]):
        raise ValueError(f"hf_causal_lm n_embd {cfg['n_embd']} must be a multiple of n_head {cfg['n_head']}")


def _seconds(spec) -> float:
    return float(spec.window.seconds) if spec.window.seconds else 1.5


def run(spec, ctx) -> dict[str, Any]:
    """Build the model, warm up, then measure prefill and decode; see the module docstring."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = settings(spec, DEFAULTS)
    torch.manual_seed(spec.seed)
    torch.set_num_threads(int(cfg["threads"]))
    device = torch.device(ctx.device)
    config = GPT2Config(
        n_layer=int(cfg["n_layer"]),
        n_embd=int(cfg["n_embd"]),
        n_head=int(cfg["n_head"]),
        vocab_size=int(cfg["vocab_size"]),
        n_positions=int(cfg["prompt_tokens"]) + int(cfg["new_tokens"]) + 1,
    )
    model = GPT2LMHeadModel(config).to(device).eval()
    batch, prompt_len, new = int(cfg["batch_size"]), int(cfg["prompt_tokens"]), int(cfg["new_tokens"])
    prompt = torch.randint(0, config.vocab_size, (batch, prompt_len), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def prefill():
        return model(input_ids=prompt, use_cache=True)

    def decode_steps(n: int) -> int:
        out = prefill()
        past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(n):
            out = model(input_ids=token, past_key_values=past, use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        sync()
        return n

    seconds = _seconds(spec)
    with torch.inference_mode():
        for _ in range(max(1, spec.warmup.steps or 1)):  # warm-up, outside every window
            decode_steps(2)
        sync()
        prefill_tokens = decode_tokens = 0
        with ctx.window("main"):
            with ctx.window("prefill"):
                t_end = time.monotonic() + seconds
                while time.monotonic() < t_end:
                    prefill()
                    sync()
                    ctx.count(tokens=batch * prompt_len)
                    ctx.step()
                    prefill_tokens += batch * prompt_len
            with ctx.window("decode"):
                # each round's prompt pass is cache building, not counted as decoded tokens
                t_end = time.monotonic() + seconds
                while time.monotonic() < t_end:
                    decode_steps(new)
                    ctx.count(tokens=batch * new)
                    ctx.step()
                    decode_tokens += batch * new
    return {
        "tokens": prefill_tokens + decode_tokens,
        "parameters": sum(p.numel() for p in model.parameters()),
        **effective(cfg),
    }


KIND = WorkloadKind(
    name="hf_causal_lm",
    run="gcbench_hf_causal_lm:run",
    description="prefill and decode of a Hugging Face causal LM (GPT-2 architecture, random weights)",
    defaults=DEFAULTS,
    check_settings=check_settings,
    unit="tokens",
    primary_metrics=("decode_j_per_token", "j_per_token"),
    metrics=("decode_j_per_token", "prefill_j_per_token", "decode_tokens_per_s", "prefill_tokens_per_s", "j_per_token"),
    compared=("decode_j_per_token", "prefill_j_per_token", "decode_tokens_per_s"),
    power_cap=True,
)
"""The kind, registered by this package's entry point ``hf_causal_lm``."""
