"""A prompt as the model's input: its ids as a tensor (apart from inferlab.corpus.text, so the
corpus job needs no torch)."""

from __future__ import annotations

import logging

import torch

from inferlab.corpus.text import Vocabulary


def encode_prompt(vocab: Vocabulary, text: str, device: str = "cpu") -> tuple[torch.Tensor, int]:
    """Prompt ids (1, P) on device, plus how many characters fell outside the vocabulary.

    Unknown characters map to <unk> (they are counted and logged, never an error).
    """
    if not text:
        raise ValueError("the prompt is empty")
    unk = vocab.unk_count(text)
    if unk:
        logging.warning("prompt %r: %d character(s) outside the vocabulary mapped to <unk>", text, unk)
    return torch.tensor([vocab.encode(text)], dtype=torch.long, device=device), unk
