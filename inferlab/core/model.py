"""A small GPT decoder: tied embedding, RoPE, pre-norm RMSNorm, 4x GELU MLP, no biases.

The parameter counts of SPEC §3 follow from these choices alone (V=2112, 4 layers):
d=256 -> 3,688,704; d=128 -> 1,057,920; d=64 -> 332,352.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from inferlab.core.config import GPTConfig


class KVCache(nn.Module):
    """Per-layer key/value buffers indexed by absolute position.

    There is no stored length: the caller's ``input_pos`` says which prefix is valid, so
    rolling back after a rejected speculation is just writing at an earlier position.
    """

    def __init__(self, batch_size: int, n_head: int, max_seq_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        super().__init__()
        shape = (batch_size, n_head, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        # k, v: (B, nh, T, hs); input_pos: (T,) contiguous positions
        end = int(input_pos[-1]) + 1
        self.k_cache[: k.size(0), :, input_pos] = k.to(self.k_cache.dtype)
        self.v_cache[: v.size(0), :, input_pos] = v.to(self.v_cache.dtype)
        return self.k_cache[: k.size(0), :, :end], self.v_cache[: v.size(0), :, :end]

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(config: GPTConfig) -> tuple[torch.Tensor, torch.Tensor]:
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_base ** (torch.arange(0, half, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(config.max_seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()  # (S, hs/2) each


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (B, nh, T, hs); cos, sin: (T, hs/2). Rotates the two halves of each head.
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return rotated.type_as(x)


class Attention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.d_model // config.n_head
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                input_pos: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)  # (B, nh, T, hs)
        start = int(input_pos[0])
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)  # (B, nh, start+T, hs)
            k, v = k.to(q.dtype), v.to(q.dtype)
        if start == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        elif T == 1:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            # query i sits at position start+i and may see keys 0..start+i
            key_pos = torch.arange(k.size(2), device=x.device)
            mask = key_pos[None, :] <= input_pos[:, None]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        hidden = config.mlp_ratio * config.d_model
        self.up = nn.Linear(config.d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.d_model, config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, input_pos):
        x = x + self.attn(self.attn_norm(x), cos, sin, input_pos)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.final_norm = RMSNorm(config.d_model, config.norm_eps)
        cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)
        # GPT-2 style: shrink the residual projections so the stream's variance stays O(1).
        for name, param in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.down.weight")):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def setup_caches(self, batch_size: int, max_seq_len: int | None = None,
                     dtype: torch.dtype = torch.float32) -> None:
        max_seq_len = max_seq_len or self.config.max_seq_len
        if max_seq_len > self.config.max_seq_len:
            raise ValueError(f"cache length {max_seq_len} exceeds the model context {self.config.max_seq_len}")
        device = self.tok_emb.weight.device
        for block in self.blocks:
            block.attn.kv_cache = KVCache(batch_size, self.config.n_head, max_seq_len,
                                          self.config.d_model // self.config.n_head, dtype, device)

    def clear_caches(self) -> None:
        for block in self.blocks:
            block.attn.kv_cache = None

    @property
    def has_cache(self) -> bool:
        return self.blocks[0].attn.kv_cache is not None

    def kv_cache_tensors(self) -> list[torch.Tensor]:
        return [t for b in self.blocks if b.attn.kv_cache is not None
                for t in (b.attn.kv_cache.k_cache, b.attn.kv_cache.v_cache)]

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor | None = None) -> torch.Tensor:
        """idx: (B, T) token ids; input_pos: (T,) contiguous absolute positions.

        Without a cache, input_pos must start at 0 (the whole sequence is recomputed).
        Returns logits (B, T, V) in float32.
        """
        B, T = idx.shape
        if input_pos is None:
            input_pos = torch.arange(T, device=idx.device)
        if int(input_pos[-1]) >= self.config.max_seq_len:
            raise ValueError(f"position {int(input_pos[-1])} exceeds the context {self.config.max_seq_len}")
        if not self.has_cache and int(input_pos[0]) != 0:
            raise ValueError("a forward that starts past position 0 needs setup_caches() first")
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
        x = self.tok_emb(idx)  # (B, T, C)
        for block in self.blocks:
            x = block(x, cos, sin, input_pos)
        x = self.final_norm(x)
        return F.linear(x, self.tok_emb.weight).float()  # tied head, (B, T, V)
