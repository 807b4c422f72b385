"""FLOP counts of the model's forwards and of whole greedy generations, cached and uncached.

Vocabulary: a generation of `length` new tokens after a prompt of P tokens takes `length`
forward passes. Uncached, pass j (0-based) runs over P + j positions; cached, pass 0 is the
prefill over P positions and pass j >= 1 runs one token at position P + j - 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferlab.core.config import GPTConfig


def matmul_params(config: GPTConfig) -> int:
    """Weights that take part in a matmul per token: the blocks' Linears plus the tied head."""
    per_layer = (4 + 2 * config.mlp_ratio) * config.d_model ** 2  # qkv 3d², proj d², MLP 2·r·d²
    return config.n_layer * per_layer + config.vocab_size * config.d_model


def forward_flops(config: GPTConfig, n_tokens: int, start: int = 0) -> float:
    """FLOPs of one forward over n_tokens at positions start..start+n_tokens-1 (causal).

    2 FLOPs per weight per token (the head runs on every position, as model() does), plus
    attention: Q·Kᵀ and A·V, 2·d FLOPs each per layer per (query, visible key) pair.
    """
    dense = 2.0 * n_tokens * matmul_params(config)
    visible_keys = n_tokens * start + n_tokens * (n_tokens + 1) / 2
    attention = 4.0 * config.n_layer * config.d_model * visible_keys
    return dense + attention


def generation_flops(config: GPTConfig, prompt_len: int, length: int, use_cache: bool) -> float:
    """All forward FLOPs of a greedy generation of `length` tokens (see the module docstring)."""
    if use_cache:
        return forward_flops(config, prompt_len) + sum(
            forward_flops(config, 1, prompt_len + j) for j in range(length - 1))
    return sum(forward_flops(config, prompt_len + j) for j in range(length))


def flop_estimate_ratio(config: GPTConfig, prompt_len: int, length: int) -> float:
    """Lesson 1's prediction of the no-cache / cache time ratio: the ratio of FLOPs."""
    return generation_flops(config, prompt_len, length, False) / generation_flops(config, prompt_len, length,
                                                                                  True)
