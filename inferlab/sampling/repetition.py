"""Experiment 2's repetition side: generate per sampling cell, score the samples, aggregate
with a bootstrap CI, and choose the default setting by the old threshold rule (max_in_corpus_drop).

Every continuation -- a cell's sample or a human reference text -- is scored by one function,
`score_continuations`, so the human row and the cells are measured identically."""

from __future__ import annotations

import warnings
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
from inferlab.corpus.text import Vocabulary, encode_prompt, load_vocabulary
from inferlab.sampling.grid import GREEDY
from inferlab.sampling.summary_table import CELL_COLUMNS, METRICS, wide_summary

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


# ---------------------------------------------------------------------------------------------
# Aggregation.
# ---------------------------------------------------------------------------------------------


def bootstrap_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Bootstrap means of the rows of values (n,) or (n, M): (resamples,) or (resamples, M).

    Rows are resampled together (a draw keeps a sample's metrics side by side); NaN entries
    (a metric undefined on that sample) are left out of each mean.
    """
    values = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    drawn = values[rng.integers(0, len(values), size=(resamples, len(values)))]
    with warnings.catch_warnings():  # an all-NaN draw is a NaN mean, not an error
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(drawn, axis=1)


def bootstrap_ci(values: Sequence[float], resamples: int, seed: int,
                 level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap of the mean over the samples where it is defined."""
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if not len(values):
        return float("nan"), float("nan"), float("nan")
    means = bootstrap_means(values, resamples, seed)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(values.mean()), float(low), float(high)


def summarise(samples: pd.DataFrame, resamples: int, seed: int) -> pd.DataFrame:
    """Tidy summary: one row per (cell, metric) with mean and 95% CI.

    The bootstrap resamples the cell's (prompt, sample) rows; every cell uses the same
    bootstrap seed, so the CIs of different cells are drawn the same way. The human reference row
    (no temperature / top-p / min-p: NaN) is kept, hence dropna=False.
    """
    rows = []
    for keys, group in samples.groupby(CELL_COLUMNS, sort=False, dropna=False):
        for metric in METRICS:
            mean, low, high = bootstrap_ci(group[metric].to_numpy(), resamples, seed)
            rows.append({**dict(zip(CELL_COLUMNS, keys, strict=True)), "metric": metric, "mean": mean,
                         "ci_low": low, "ci_high": high, "n_samples": len(group),
                         "n_prompts": group["prompt"].nunique(), "resamples": resamples})
    return pd.DataFrame(rows)


def example_texts(samples: pd.DataFrame, per_cell: int) -> pd.DataFrame:
    """A few texts per cell: sample 0 of the first prompts, then sample 1, ..."""
    prompt_rank = {p: i for i, p in enumerate(dict.fromkeys(samples["prompt"]))}
    ordered = samples.assign(_rank=samples["prompt"].map(prompt_rank))
    ordered = ordered.sort_values(["sample", "_rank"], kind="stable")
    picked = ordered.groupby("cell", sort=False).head(per_cell)
    cell_order = {c: i for i, c in enumerate(dict.fromkeys(samples["cell"]))}
    picked = picked.assign(_cell=picked["cell"].map(cell_order)).sort_values(["_cell", "sample", "_rank"])
    return picked[[*CELL_COLUMNS, "prompt", "sample", "seq_rep_4", "in_corpus_4gram_share",
                   "text"]].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# The default setting.
# ---------------------------------------------------------------------------------------------


def rule_text(max_in_corpus_drop: float) -> str:
    return (f"default = the sampling cell (greedy excluded: a sampling default must sample) with the "
            f"lowest mean seq-rep-4 among cells whose mean in-corpus 4-gram share is >= greedy's "
            f"minus {max_in_corpus_drop:g}; cells whose mean seq-rep-4 lies inside the lowest cell's "
            f"95% CI count as tied, and the tie goes to the higher in-corpus share. The rule picks the best "
            f"top-p cell and the best min-p cell separately; min-p replaces top-p only if its best "
            f"cell has lower seq-rep-4, an in-corpus share >= the top-p cell's, and a seq-rep-4 gap "
            f"beyond noise (its 95% CI high below the top-p cell's CI low). If no cell meets the "
            f"share floor, the cell with the highest share is taken and rule_satisfied is false.")


def _best(cells: pd.DataFrame, floor: float) -> tuple[str | None, bool]:
    """Lowest seq-rep-4 among cells at or above the share floor.

    Many sampled cells sit near zero repetition, so a bare minimum would be decided by noise:
    cells whose mean lies inside the lowest cell's bootstrap CI are tied, and the tie goes to
    the higher in-corpus share (then config order).
    """
    if cells.empty:
        return None, False
    eligible = cells[cells["in_corpus_4gram_share"] >= floor]
    if eligible.empty:
        return str(cells["in_corpus_4gram_share"].idxmax()), False
    ranked = eligible.assign(_order=range(len(eligible))).sort_values(
        ["seq_rep_4", "in_corpus_4gram_share", "_order"], ascending=[True, False, True], kind="stable")
    tied = ranked[ranked["seq_rep_4"] <= ranked["seq_rep_4_ci_high"].iloc[0]]
    best = tied.sort_values(["in_corpus_4gram_share", "_order"], ascending=[False, True], kind="stable")
    return str(best.index[0]), True


def choose_default(summary: pd.DataFrame, distribution: pd.DataFrame,
                   max_in_corpus_drop: float) -> dict:
    """Apply the config rule to the repetition summary; returns one flat record with the numbers used.

    summary: the tidy table of `summarise` (must contain the greedy cell);
    distribution: the next-token table (cell, kept, entropy_nats, entropy_bits).
    """
    cells = wide_summary(summary)
    if GREEDY not in cells.index:
        raise ValueError("the repetition summary has no greedy cell to compare against")
    greedy_row = cells.loc[GREEDY]
    sampled = cells["truncation"].isin(["top_p", "min_p"])
    floor = float(greedy_row["in_corpus_4gram_share"]) - max_in_corpus_drop
    best_top_p, ok_top_p = _best(cells[cells["truncation"] == "top_p"], floor)
    best_min_p, ok_min_p = _best(cells[cells["truncation"] == "min_p"], floor)
    if best_top_p is None and best_min_p is None:
        raise ValueError("no sampling cells besides greedy")
    dist = distribution.set_index("cell")

    def numbers(prefix: str, cell: str | None) -> dict:
        """The numbers of one cell that the decision used, NaN / -1 where there is no such cell."""
        row = cells.loc[cell] if cell is not None else None
        in_dist = cell is not None and cell in dist.index
        values = {"cell": cell}
        for key in ("seq_rep_4", "seq_rep_4_ci_low", "seq_rep_4_ci_high", "in_corpus_4gram_share",
                    "in_corpus_4gram_share_ci_low", "in_corpus_4gram_share_ci_high", "distinct_2"):
            values[key] = float(row[key]) if row is not None else float("nan")
        values["kept"] = int(dist.loc[cell, "kept"]) if in_dist else -1
        for key in ("entropy_nats", "entropy_bits"):
            values[key] = float(dist.loc[cell, key]) if in_dist else float("nan")
        return {f"{prefix}_{key}": value for key, value in values.items()}

    if best_min_p is None:
        switch, reason = False, "no min-p cells in the grid"
    elif best_top_p is None:
        switch, reason = True, "no top-p cells in the grid"
    else:
        tp, mp = cells.loc[best_top_p], cells.loc[best_min_p]
        lower = mp["seq_rep_4"] < tp["seq_rep_4"]
        share_ok = mp["in_corpus_4gram_share"] >= tp["in_corpus_4gram_share"]
        beyond_noise = mp["seq_rep_4_ci_high"] < tp["seq_rep_4_ci_low"]
        switch = bool(lower and share_ok and beyond_noise and ok_min_p)
        reason = (f"min-p {best_min_p}: seq-rep-4 {mp['seq_rep_4']:.3f} "
                  f"[{mp['seq_rep_4_ci_low']:.3f}, {mp['seq_rep_4_ci_high']:.3f}], in-corpus "
                  f"{mp['in_corpus_4gram_share']:.3f} vs top-p {best_top_p}: seq-rep-4 "
                  f"{tp['seq_rep_4']:.3f} [{tp['seq_rep_4_ci_low']:.3f}, {tp['seq_rep_4_ci_high']:.3f}], "
                  f"in-corpus {tp['in_corpus_4gram_share']:.3f}; lower seq-rep-4: {bool(lower)}, "
                  f"share >= top-p's: {bool(share_ok)}, gap beyond the CIs: {bool(beyond_noise)}, "
                  f"min-p meets the share floor: {ok_min_p}")
    chosen = best_min_p if switch else best_top_p
    row = cells.loc[chosen]
    chosen_numbers = numbers("chosen", chosen)
    return {
        "kind": "max_in_corpus_drop",
        "cell": chosen, "truncation": row["truncation"], "temperature": float(row["temperature"]),
        "top_p": float(row["top_p"]), "min_p": float(row["min_p"]),
        "rule": rule_text(max_in_corpus_drop), "max_in_corpus_drop": float(max_in_corpus_drop),
        "rule_satisfied": bool(ok_min_p if switch else ok_top_p),
        **{key.removeprefix("chosen_"): value for key, value in chosen_numbers.items() if key != "chosen_cell"},
        "greedy_seq_rep_4": float(greedy_row["seq_rep_4"]),
        "greedy_in_corpus_4gram_share": float(greedy_row["in_corpus_4gram_share"]),
        "in_corpus_floor": floor,
        "eligible_cells": int((sampled & (cells["in_corpus_4gram_share"] >= floor)).sum()),
        "sampling_cells": int(sampled.sum()),
        **numbers("best_top_p", best_top_p), **numbers("best_min_p", best_min_p),
        "min_p_decision": "switch to min-p" if switch else "keep top-p",
        "min_p_reason": reason,
    }
