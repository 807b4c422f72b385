"""Sampling: temperature, then top-k / top-p / min-p truncation, as in HF transformers.

Three things live here:
- `logits_to_probs`, the tensor version used while generating (any float dtype, any batch shape);
- `truncated_distribution` / `distribution_stats`, a plain float64 reference of the same
  algorithm that the distribution table is computed with. It is written as simple loops so that
  the report's offline workbench page (JavaScript, IEEE doubles) can mirror it step by step;
- seeded samplers for `inferlab.core.generate.generate(..., sampler=...)`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

Sampler = Callable[[torch.Tensor], torch.Tensor]


def logits_to_probs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                    min_p: float = 0.0, top_k: int = 0) -> torch.Tensor:
    """Truncated, renormalised next-token distribution; works on (..., V) in any float dtype.

    Temperature is applied first. top-k keeps the k most likely tokens (ties at the k-th
    value are all kept). top-p then works on the distribution left by top-k, renormalised
    (HF applies it to the top-k-filtered scores): it keeps the smallest prefix of the
    descending order, ties broken by token id, whose mass is >= top_p -- always at least the
    top token; top_p >= 1 keeps everything. min-p keeps tokens with p >= min_p * p_max
    (a ratio, so renormalisation does not change it).
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0; use greedy decoding for T = 0")
    probs = torch.softmax(logits / temperature, dim=-1)
    keep = torch.ones_like(probs, dtype=torch.bool)
    if top_k > 0:
        kth = torch.topk(probs, min(top_k, probs.size(-1)), dim=-1).values[..., -1:]
        keep &= probs >= kth
    if top_p < 1.0:
        masked = probs
        if top_k > 0:
            masked = torch.where(keep, probs, torch.zeros_like(probs))
            masked = masked / masked.sum(dim=-1, keepdim=True)
        # stable: equal probabilities stay in token-id order, so ties are cut deterministically
        sorted_probs, order = torch.sort(masked, dim=-1, descending=True, stable=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        # mass strictly before each token (exclusive prefix sum, no cumsum - p rounding)
        mass_before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
        # a token is kept when the mass strictly before it is still short of top_p
        keep_sorted = mass_before < top_p
        keep_sorted[..., 0] = True
        keep &= torch.zeros_like(keep).scatter(-1, order, keep_sorted)
    if min_p > 0.0:
        keep &= probs >= min_p * probs.max(dim=-1, keepdim=True).values
    truncated = torch.where(keep, probs, torch.zeros_like(probs))
    return truncated / truncated.sum(dim=-1, keepdim=True)


# ---------------------------------------------------------------------------------------------
# float64 reference: the distribution table and the JavaScript workbench use this algorithm.
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DistributionStats:
    entropy_nats: float
    entropy_bits: float
    kept: int


def truncated_distribution(logits: Sequence[float], temperature: float, top_p: float = 1.0,
                           min_p: float = 0.0) -> tuple[list[int], list[float]]:
    """The truncated, renormalised distribution, in IEEE double precision.

    Returns (order, q): the kept token ids in descending-probability order and their
    renormalised probabilities. The exact algorithm (the JS port mirrors it operation by
    operation; every sum is a left-to-right loop, never pairwise or Kahan):

      1. x[i] = logits[i] / T                      (a division, for i = 0..V-1; T > 0)
      2. m = max_i x[i]
      3. e[i] = exp(x[i] - m)
      4. S = e[0] + e[1] + ... + e[V-1]            (token-id order)
      5. p[i] = e[i] / S
      6. order = token ids sorted by p descending; equal p keep ascending token id (stable)
      7. top-p (only when top_p < 1): walk `order` with mass = 0; keep the token when it is
         the first one or mass < top_p, then mass = mass + p[token]; stop at the first token
         not kept (the kept set is the smallest prefix with mass >= top_p).
         top_p >= 1 keeps all V tokens, including any whose p underflowed to 0.
      8. min-p (only when min_p > 0): of the tokens still kept, keep those with
         p[i] >= min_p * p[order[0]].
      9. Z = sum of p over the kept tokens, in `order` order; q = p / Z.
    Entropy and kept count are in `distribution_stats`.
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0; use greedy decoding for T = 0")
    x = [float(v) / temperature for v in logits]
    m = max(x)
    e = [math.exp(v - m) for v in x]
    total = 0.0
    for v in e:
        total += v
    p = [v / total for v in e]
    order = sorted(range(len(p)), key=lambda i: -p[i])  # Python's sort is stable
    if top_p < 1.0:
        kept_order, mass = [], 0.0
        for rank, token in enumerate(order):
            if rank > 0 and not mass < top_p:
                break
            kept_order.append(token)
            mass += p[token]
        order = kept_order
    if min_p > 0.0:
        threshold = min_p * p[order[0]]
        order = [token for token in order if p[token] >= threshold]
    z = 0.0
    for token in order:
        z += p[token]
    return order, [p[token] / z for token in order]


def distribution_stats(logits: Sequence[float], temperature: float, top_p: float = 1.0,
                       min_p: float = 0.0) -> DistributionStats:
    """Entropy (nats, bits) and kept count of the truncated, renormalised distribution.

    Continuing `truncated_distribution`:
     10. H = 0; for each kept token in `order`: if q > 0: H = H - q * log(q)   (natural log)
     11. entropy_bits = H / log(2); kept = number of kept tokens.
    exp and log come from the C library here and from V8 in the browser; both are within an
    ulp, so the page should compare entropies to ~1e-12 and kept counts exactly.
    """
    order, q = truncated_distribution(logits, temperature, top_p, min_p)
    entropy = 0.0
    for value in q:
        if value > 0.0:
            entropy -= value * math.log(value)
    return DistributionStats(entropy, entropy / math.log(2.0), len(order))


def logits_export(prompt: str, model: str, checkpoint_sha256: str, vocab: Sequence[str],
                  logits: torch.Tensor, prompt_unk_chars: int) -> dict:
    """The JSON the workbench reads. float32 logits become JSON numbers that parse back to
    exactly the same doubles (Python's repr is the shortest round-trip form); the table must
    be computed from these parsed values, not from the tensor."""
    values = [float(v) for v in logits.detach().to(torch.float32).cpu().tolist()]
    if len(values) != len(vocab):
        raise ValueError(f"{len(values)} logits for a vocabulary of {len(vocab)}")
    return {"prompt": prompt, "model": model, "checkpoint_sha256": checkpoint_sha256,
            "vocab": list(vocab), "logits": values, "prompt_unk_chars": prompt_unk_chars}


def distribution_rows(logits: Sequence[float], cells: Sequence[dict]) -> list[dict]:
    """One row per cell; a cell is {cell, truncation ("top_p" | "min_p"), temperature, top_p, min_p}."""
    rows = []
    for cell in cells:
        stats = distribution_stats(logits, cell["temperature"], cell["top_p"], cell["min_p"])
        rows.append({"cell": cell["cell"], "truncation": cell["truncation"],
                     "temperature": float(cell["temperature"]), "top_p": float(cell["top_p"]),
                     "min_p": float(cell["min_p"]), "entropy_nats": stats.entropy_nats,
                     "entropy_bits": stats.entropy_bits, "kept": stats.kept})
    return rows


# ---------------------------------------------------------------------------------------------
# Seeded sampling for generate().
# ---------------------------------------------------------------------------------------------

def sample_seed(base_seed: int, prompt: str, sample: int) -> int:
    """Seed of one (prompt, sample). The setting is deliberately not part of it: every cell
    draws from the same random stream for a given prompt and sample (common random numbers),
    so differences between cells come from the setting, not from the dice. A (setting,
    prompt, sample) triple therefore always gives the same text."""
    digest = hashlib.sha256(f"{base_seed}|{prompt}|{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def make_generators(base_seed: int, prompt: str, samples: int,
                    device: str | torch.device = "cpu") -> list[torch.Generator]:
    """One torch.Generator per sample row of a batch."""
    generators = []
    for sample in range(samples):
        gen = torch.Generator(device=device)
        gen.manual_seed(sample_seed(base_seed, prompt, sample))
        generators.append(gen)
    return generators


def draw(probs: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """Inverse-CDF draw, row b with generators[b]: probs (B, V) -> ids (B,).

    One uniform per row and step, so a row's stream does not depend on the other rows, and
    zero-probability (truncated) tokens can never be drawn (strict > on the cumulative sum).
    """
    if probs.size(0) != len(generators):
        raise ValueError(f"{probs.size(0)} rows but {len(generators)} generators")
    probs = probs.to(torch.float64)
    cumulative = torch.cumsum(probs, dim=-1)  # (B, V)
    u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64, device=g.device)
                   for g in generators]).to(probs.device)  # (B,)
    target = (u * cumulative[:, -1]).unsqueeze(-1)  # (B, 1), strictly below the total
    ids = torch.searchsorted(cumulative, target, right=True).squeeze(-1)
    return ids.clamp_(max=probs.size(-1) - 1)


def make_sampler(temperature: float, top_p: float = 1.0, min_p: float = 0.0,
                 generators: Sequence[torch.Generator] = ()) -> Sampler:
    """A sampler for generate(): logits (B, V) -> ids (B,), truncated in float64."""
    generators = list(generators)

    def sampler(logits: torch.Tensor) -> torch.Tensor:
        probs = logits_to_probs(logits.to(torch.float64), temperature, top_p, min_p)
        return draw(probs, generators)

    return sampler


def counting(sampler: Sampler, on_step: Callable[[], None]) -> Sampler:
    """Wraps a sampler so each decode step reports progress (generate() calls it once a step)."""

    def wrapped(logits: torch.Tensor) -> torch.Tensor:
        ids = sampler(logits)
        on_step()
        return ids

    return wrapped
