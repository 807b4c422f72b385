"""Validation loss on the full split: every token predicted exactly once."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F


def windows(ids: torch.Tensor, seq_len: int, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Non-overlapping (input, target) windows covering ids[1:]; the last batch may be ragged in T."""
    starts = list(range(0, len(ids) - 1, seq_len))
    full = [s for s in starts if s + seq_len + 1 <= len(ids)]
    for i in range(0, len(full), batch_size):
        chunk = full[i:i + batch_size]
        x = torch.stack([ids[s:s + seq_len] for s in chunk])
        y = torch.stack([ids[s + 1:s + seq_len + 1] for s in chunk])
        yield x, y
    if len(full) < len(starts):  # only the last window can be short
        s = starts[-1]
        yield ids[s:-1].unsqueeze(0), ids[s + 1:].unsqueeze(0)


@torch.no_grad()
def evaluate_loss(model: torch.nn.Module, ids: torch.Tensor, seq_len: int, batch_size: int = 16,
                  on_batch: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> float:
    """Mean next-token cross-entropy (nats) over the whole of ids, in fp32.

    on_batch(logits, targets) lets callers (e.g. quantization KL) reuse the same pass.
    """
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    device = next(model.parameters()).device
    for x, y in windows(ids, seq_len, batch_size):
        x, y = x.to(device), y.to(device)
        logits = model(x)
        total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
        if on_batch is not None:
            on_batch(logits, y)
    model.train(was_training)
    return total / count
