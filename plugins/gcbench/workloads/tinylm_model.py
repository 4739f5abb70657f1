"""TinyLM: a small GPT-style decoder-only transformer (the regime study's backbone).

Architecture (Radford et al. 2019, GPT-2, as in nanoGPT): token and learned position
embeddings; ``layers`` pre-LayerNorm blocks of causal multi-head self-attention
(``torch.nn.functional.scaled_dot_product_attention`` with ``is_causal=True``, which
picks a fused kernel where one exists) and a 4x GELU MLP, each with a residual; a final
LayerNorm; the output projection tied to the token embedding.

Shapes: ``idx`` int64 [B, T] with T <= context_length -> logits [B, T, vocab_size].
Parameters: V*d + C*d + L*(12*d^2 + 13*d) + 2*d (V vocabulary, C context, d width,
L layers; biases included, output tied to the embedding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, fused QKV projection."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} must be a multiple of heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """GPT-style decoder; see the module docstring for shapes and parameter count."""

    def __init__(self, vocab_size: int, context_length: int, layers: int, d_model: int, heads: int):
        super().__init__()
        self.context_length = context_length
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context_length, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying (GPT-2)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.context_length:
            raise ValueError(f"sequence of {t} tokens exceeds context_length {self.context_length}")
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (a tied weight counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
