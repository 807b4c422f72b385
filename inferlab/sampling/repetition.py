"""Experiment 2's repetition side: generate per sampling cell and score the samples. The
torch-free aggregation jobs read the rest: the bootstrap summary (inferlab.sampling.aggregate)
and the old threshold rule for the default setting (inferlab.sampling.threshold_rule).

Every continuation -- a cell's sample or a human reference text -- is scored by one function,
`score_continuations`, so the human row and the cells are measured identically."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from inferlab.core.checkpoint import load_checkpoint, load_token_ids
from inferlab.core.generate import generate, greedy
from inferlab.core.model import GPT
from inferlab.core.sampler import counting, make_generators, make_sampler, sample_seed
from inferlab.corpus.prompt import encode_prompt
from inferlab.corpus.text import Vocabulary, load_vocabulary

# ---------------------------------------------------------------------------------------------
# Metrics on one sample's generated token ids (the prompt is never included).
# ---------------------------------------------------------------------------------------------


def ngram_keys(ids: Sequence[int] | np.ndarray, n: int, base: int) -> np.ndarray:
    """Each n-gram as one int64, sum ids[i+j] * base**(n-1-j); needs base**n < 2**63."""
    if base ** n >= 2 ** 63:
        raise ValueError(f"base {base} ** {n} does not fit in int64")
    ids = np.asarray(ids, dtype=np.int64)
    count = len(ids) - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.int64)
    keys = np.zeros(count, dtype=np.int64)
    for j in range(n):
        keys = keys * base + ids[j: j + count]
    return keys


def distinct_n(ids: Sequence[int], n: int) -> float:
    """Unique n-grams / all n-grams (NaN when the sample is shorter than n)."""
    keys = ngram_keys(ids, n, base=max(int(np.max(ids, initial=0)) + 1, 2))
    return float(len(np.unique(keys)) / len(keys)) if len(keys) else float("nan")


def seq_rep_n(ids: Sequence[int], n: int = 4) -> float:
    """seq-rep-n = 1 - unique n-grams / all n-grams (Welleck et al. 2019)."""
    return 1.0 - distinct_n(ids, n)


def corpus_ngram_index(train_ids: Sequence[int] | np.ndarray, base: int, n: int = 4) -> np.ndarray:
    """Sorted unique int64 keys of every n-gram of the training text (for searchsorted lookups)."""
    return np.unique(ngram_keys(train_ids, n, base))


def load_scorer(meta_path: str | Path, vocab_path: str | Path, vocab_sha256: str,
                train_path: str | Path) -> tuple[GPT, dict, Vocabulary, np.ndarray]:
    """What a cell job and the human job score with: the target (checked against the corpus's
    vocabulary), its meta.json, the vocabulary and the training text's 4-gram index."""
    vocab = load_vocabulary(vocab_path)
    model, meta = load_checkpoint(Path(meta_path).parent, expected_vocab_sha256=vocab_sha256)
    return model, meta, vocab, corpus_ngram_index(load_token_ids(train_path).numpy(), base=len(vocab))


def in_corpus_share(ids: Sequence[int], index: np.ndarray, base: int, n: int = 4) -> float:
    """Fraction of the sample's n-grams (counted with multiplicity) that occur in the training text."""
    keys = ngram_keys(ids, n, base)
    if not len(keys):
        return float("nan")
    pos = np.searchsorted(index, keys).clip(max=max(len(index) - 1, 0))
    found = index[pos] == keys if len(index) else np.zeros(len(keys), dtype=bool)
    return float(found.mean())


def zipf_coefficient(ids: Sequence[int]) -> float:
    """Zipf coefficient s of one sample's token frequencies: frequency ~ rank^-s.

    1. count each distinct token of the sample and sort the counts in decreasing order
       (rank 1 = most frequent; ties keep an arbitrary but irrelevant order: equal counts give
       equal log frequencies);
    2. fit log(count) = a - s * log(rank) by ordinary least squares over all distinct tokens;
    3. return s (the negative slope). All-distinct text gives 0, repetitive text a large s;
       NaN when the sample has fewer than 2 distinct tokens (no slope to fit).
    """
    counts = np.sort(np.unique(np.asarray(ids), return_counts=True)[1])[::-1]
    if len(counts) < 2:
        return float("nan")
    ranks = np.arange(1, len(counts) + 1, dtype=np.float64)
    slope = np.polyfit(np.log(ranks), np.log(counts.astype(np.float64)), 1)[0]
    return float(-slope)


def sample_metrics(ids: Sequence[int], index: np.ndarray, base: int) -> dict:
    """The text-only metrics of one continuation (no model needed)."""
    return {"seq_rep_4": seq_rep_n(ids, 4), "distinct_1": distinct_n(ids, 1),
            "distinct_2": distinct_n(ids, 2), "in_corpus_4gram_share": in_corpus_share(ids, index, base, 4),
            "zipf_coefficient": zipf_coefficient(ids)}


@torch.no_grad()
def continuation_nll(model: GPT, context: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood per token (nats) of each continuation under the model.

    context (B, P) and continuation (B, N) token ids. 1. one full, uncached forward over
    context + continuation; 2. the logits at positions P-1 .. P+N-2 predict the continuation;
    3. the mean of -log p over those N tokens only (the context is conditioned on, never scored).
    """
    sequence = torch.cat([context, continuation], dim=1)
    if sequence.size(1) > model.config.max_seq_len:
        raise ValueError(f"context + continuation = {sequence.size(1)} tokens exceeds the context "
                         f"{model.config.max_seq_len}")
    was_training = model.training
    model.eval()
    logits = model(sequence)[:, context.size(1) - 1: -1]  # (B, N, V)
    model.train(was_training)
    nll = F.cross_entropy(logits.transpose(1, 2).float(), continuation, reduction="none")  # (B, N)
    return nll.mean(dim=1)


def score_continuations(model: GPT, context: torch.Tensor, continuations: torch.Tensor,
                        corpus_index: np.ndarray, base: int) -> list[dict]:
    """All metrics of each continuation (B, N) after its context (B, P): the one scorer shared by
    the sampling cells and the human reference, so both rows are measured identically."""
    nll = continuation_nll(model, context, continuations).tolist()
    return [{**sample_metrics(ids, corpus_index, base), "nll_per_token": nll_value}
            for ids, nll_value in zip(continuations.tolist(), nll, strict=True)]


# ---------------------------------------------------------------------------------------------
# One cell: prompts x samples x new tokens.
# ---------------------------------------------------------------------------------------------


def generate_cell(model: GPT, vocab: Vocabulary, cell: dict, prompts: Sequence[str], samples: int,
                  new_tokens: int, seed: int, corpus_index: np.ndarray,
                  on_step: Callable[[], None] = lambda: None) -> pd.DataFrame:
    """Rows of one cell, one per (prompt, sample), with the METRICS (the NLL is the model's own
    score of its sample) and the text.

    cell = {cell, truncation ("none" | "top_p" | "min_p"), temperature, top_p, min_p}; temperature 0
    means greedy. The samples of a prompt are one batch through the KV-cache path; greedy rows
    are identical by construction, so greedy runs the prompt once and repeats the row.
    """
    base = len(vocab)
    rows = []
    for prompt in prompts:
        prompt_ids, unk = encode_prompt(vocab, prompt)
        if cell["temperature"] == 0:
            out = generate(model, prompt_ids, new_tokens, sampler=counting(greedy, on_step))
            new = out.new_tokens(prompt_ids.size(1)).expand(samples, -1)
        else:
            sampler = make_sampler(cell["temperature"], cell["top_p"], cell["min_p"],
                                   make_generators(seed, prompt, samples))
            out = generate(model, prompt_ids.expand(samples, -1), new_tokens,
                           sampler=counting(sampler, on_step))
            new = out.new_tokens(prompt_ids.size(1))
        scores = score_continuations(model, prompt_ids.expand(new.size(0), -1), new, corpus_index, base)
        for sample, (ids, metrics) in enumerate(zip(new.tolist(), scores, strict=True)):
            rows.append({"cell": cell["cell"], "truncation": cell["truncation"],
                         "temperature": float(cell["temperature"]), "top_p": float(cell["top_p"]),
                         "min_p": float(cell["min_p"]), "prompt": prompt, "sample": sample,
                         "seed": sample_seed(seed, prompt, sample) if cell["temperature"] else -1,
                         **metrics, "new_tokens": len(ids),
                         "prompt_unk_chars": unk, "text": vocab.decode(ids)})
    return pd.DataFrame(rows)
