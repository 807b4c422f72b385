"""Experiment 2's human reference row: held-out continuations from the validation split, shaped
like the sampled cells (prompts x samples x new_tokens) and scored by the cells' own scorer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from inferlab.core.model import GPT
from inferlab.corpus.text import Vocabulary
from inferlab.sampling import repetition
from inferlab.sampling.grid import HUMAN

AFTER_PROMPT = "after_prompt"
RANDOM_WINDOW = "random_window"


@dataclass(frozen=True)
class HumanContinuation:
    prompt: str        # the repetition prompt this text stands in for
    offset: int        # where the continuation starts in the validation ids
    source: str        # AFTER_PROMPT or RANDOM_WINDOW


def prompt_occurrences(val_ids: np.ndarray, prompt_ids: Sequence[int], new_tokens: int) -> list[int]:
    """Offsets just after each occurrence of prompt_ids in val_ids that leave new_tokens to read."""
    width = len(prompt_ids)
    last = len(val_ids) - width - new_tokens
    if last < 0:
        return []
    windows = np.lib.stride_tricks.sliding_window_view(val_ids[: last + width], width)
    starts = np.flatnonzero((windows == np.asarray(prompt_ids)).all(axis=1))
    return [int(s) + width for s in starts]


def pick_continuations(val_ids: np.ndarray, vocab: Vocabulary, prompts: Sequence[str], samples: int,
                       new_tokens: int, seed: int) -> list[HumanContinuation]:
    """samples continuations per prompt, matching the cells' shape.

    1. the text right after the prompt's characters, where the prompt occurs in the validation
       split (a seeded choice of `samples` occurrences when there are more, in text order);
    2. the rest (all of them when the prompt never occurs) are seeded random windows whose
       context is the len(prompt) characters before them, so every text gets the same context
       length as the cells' prompts. Windows never repeat an offset already taken for the prompt.
    """
    rng = np.random.default_rng(seed)
    picked = []
    for prompt in prompts:
        prompt_ids = vocab.encode(prompt)
        found = prompt_occurrences(val_ids, prompt_ids, new_tokens)
        if len(found) > samples:
            found = sorted(rng.choice(found, size=samples, replace=False).tolist())
        offsets = [HumanContinuation(prompt, o, AFTER_PROMPT) for o in found]
        low, high = len(prompt_ids), len(val_ids) - new_tokens  # room for the context and the text
        if high - low + 1 < samples:
            raise ValueError(f"the validation split ({len(val_ids)} tokens) is too short for "
                             f"{samples} windows of {new_tokens} tokens after a {low}-token context")
        taken = {o.offset for o in offsets}
        while len(offsets) < samples:
            start = int(rng.integers(low, high + 1))
            if start not in taken:
                taken.add(start)
                offsets.append(HumanContinuation(prompt, start, RANDOM_WINDOW))
        picked += offsets
    return picked


def score_human(model: GPT, vocab: Vocabulary, val_ids: np.ndarray, prompts: Sequence[str], samples: int,
                new_tokens: int, seed: int, corpus_index: np.ndarray) -> pd.DataFrame:
    """Rows of the human reference, one per (prompt, sample), with the columns of a cell's rows
    (cell "human", truncation "reference", no sampling knobs) plus source, offset and context."""
    val_ids = np.asarray(val_ids, dtype=np.int64)
    picked = pick_continuations(val_ids, vocab, prompts, samples, new_tokens, seed)
    rows = []
    for prompt in prompts:
        chosen = [c for c in picked if c.prompt == prompt]
        width = len(prompt)
        context = torch.tensor(np.stack([val_ids[c.offset - width: c.offset] for c in chosen]))
        texts = torch.tensor(np.stack([val_ids[c.offset: c.offset + new_tokens] for c in chosen]))
        # through the module, so the human row uses exactly the scorer the cells use (tests check)
        scores = repetition.score_continuations(model, context, texts, corpus_index, len(vocab))
        for sample, (item, ids, ctx, metrics) in enumerate(
                zip(chosen, texts.tolist(), context.tolist(), scores, strict=True)):
            rows.append({"cell": HUMAN, "truncation": "reference", "temperature": float("nan"),
                         "top_p": float("nan"), "min_p": float("nan"), "prompt": prompt, "sample": sample,
                         "seed": -1, **metrics, "new_tokens": len(ids), "prompt_unk_chars": vocab.unk_count(prompt),
                         "text": vocab.decode(ids), "source": item.source, "offset": item.offset,
                         "context": vocab.decode(ctx)})
    return pd.DataFrame(rows)
