"""Sampling: temperature, then top-k / top-p / min-p truncation, as in HF transformers."""

from __future__ import annotations

import torch


def logits_to_probs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                    min_p: float = 0.0, top_k: int = 0) -> torch.Tensor:
    """Truncated, renormalised next-token distribution; works on (..., V) in any float dtype.

    Temperature is applied first. top-p keeps the smallest prefix of the sorted distribution
    whose mass is >= top_p (always at least the top token); min-p keeps tokens with
    p >= min_p * p_max.
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0; use greedy decoding for T = 0")
    probs = torch.softmax(logits / temperature, dim=-1)
    keep = torch.ones_like(probs, dtype=torch.bool)
    if top_k > 0:
        kth = torch.topk(probs, min(top_k, probs.size(-1)), dim=-1).values[..., -1:]
        keep &= probs >= kth
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        # a token is kept when the mass strictly before it is still short of top_p
        keep_sorted = mass_before < top_p
        keep_sorted[..., 0] = True
        keep &= torch.zeros_like(keep).scatter(-1, order, keep_sorted)
    if min_p > 0.0:
        keep &= probs >= min_p * probs.max(dim=-1, keepdim=True).values
    truncated = torch.where(keep, probs, torch.zeros_like(probs))
    return truncated / truncated.sum(dim=-1, keepdim=True)
