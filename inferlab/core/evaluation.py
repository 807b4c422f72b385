"""Validation loss on the full split (every token predicted exactly once), and a model against its fp32 reference."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TextIO

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm


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




@torch.no_grad()
def evaluate_against_reference(reference: nn.Module, candidate: nn.Module, ids: torch.Tensor,
                               seq_len: int, batch_size: int = 16,
                               progress_file: TextIO | None = None) -> dict:
    """Both losses through evaluate_loss, plus mean KL(ref || candidate) and top-1 agreement.

    The candidate's pass recomputes the reference logits batch by batch (same windows, same
    order), so nothing the size of the validation logits is ever held in memory.
    """
    reference.eval()
    n_batches = sum(1 for _ in windows(ids, seq_len, batch_size))
    bar = tqdm(total=2 * n_batches, desc="eval fp32 + quantised", file=progress_file,
               mininterval=5.0, ascii=True)
    ref_loss = evaluate_loss(reference, ids, seq_len, batch_size, on_batch=lambda *_: bar.update())
    device = next(reference.parameters()).device
    batches = windows(ids, seq_len, batch_size)
    totals = {"kl": 0.0, "agree": 0, "tokens": 0}

    def on_batch(logits: torch.Tensor, targets: torch.Tensor) -> None:
        x, y = next(batches)
        if not torch.equal(y.to(targets.device), targets):
            raise RuntimeError("reference and candidate windows went out of step")
        ref_logp = F.log_softmax(reference(x.to(device)), dim=-1)  # (B, T, V)
        logp = F.log_softmax(logits, dim=-1)
        totals["kl"] += (ref_logp.exp() * (ref_logp - logp)).sum().item()
        totals["agree"] += (ref_logp.argmax(-1) == logp.argmax(-1)).sum().item()
        totals["tokens"] += targets.numel()
        bar.update()

    loss = evaluate_loss(candidate, ids, seq_len, batch_size, on_batch=on_batch)
    bar.close()
    return {"loss": loss, "fp32_loss": ref_loss, "delta_loss": loss - ref_loss,
            "kl_mean_nats": totals["kl"] / totals["tokens"],
            "top1_agreement": totals["agree"] / totals["tokens"], "eval_tokens": totals["tokens"]}
