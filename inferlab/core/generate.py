"""Greedy/sampled generation: prefill, one-token decode and the decode loop, with or without the KV cache.

The cached loop runs on a decode engine (inferlab.core.engine): eager by default, the seed's path;
the compiled engine gives the same tokens through a static buffer and a compiled step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from inferlab.core.engine import EagerEngine, Engine, own_rows
from inferlab.core.model import GPT

# A sampler maps next-token logits (B, V) to token ids (B,).
Sampler = Callable[[torch.Tensor], torch.Tensor]


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


@torch.no_grad()
def prefill(model: GPT, prompt: torch.Tensor) -> torch.Tensor:
    """Runs the prompt (B, T) through the model from position 0; returns last logits (B, V)."""
    input_pos = torch.arange(prompt.size(1), device=prompt.device)
    return model(prompt, input_pos)[:, -1]


@torch.no_grad()
def decode_one_token(model: GPT, token: torch.Tensor, position: int) -> torch.Tensor:
    """Cached step: token (B, 1) at absolute position; returns logits (B, V)."""
    input_pos = torch.tensor([position], device=token.device)
    return model(token, input_pos)[:, -1]


@dataclass
class Generation:
    tokens: torch.Tensor          # (B, T_prompt + n) prompt followed by the new tokens
    step_logits: list[torch.Tensor] | None  # n tensors (B, V), the logits each new token came from

    def new_tokens(self, prompt_len: int) -> torch.Tensor:
        return self.tokens[:, prompt_len:]


@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
             sampler: Sampler = greedy, keep_logits: bool = False, engine: Engine | None = None) -> Generation:
    """Decodes max_new_tokens after prompt (B, T). The cached path opens its own engine session."""
    total = prompt.size(1) + max_new_tokens
    if total > model.config.max_seq_len:
        raise ValueError(f"prompt + new tokens = {total} exceeds the context {model.config.max_seq_len}")
    engine = engine or EagerEngine()
    if not use_cache:
        def recompute(tokens, start, sequence):
            return engine.recompute_last(model, sequence)
        return _decode_loop(recompute, recompute, prompt, max_new_tokens, sampler, keep_logits)
    session = engine.open(model, prompt.size(0), total)
    try:
        return _decode_loop(lambda tokens, start, sequence: session.forward(tokens, start)[:, -1],
                            lambda token, start, sequence: session.step(token, start)[:, -1],
                            prompt, max_new_tokens, sampler, keep_logits)
    finally:
        session.close()


@torch.no_grad()
def decode_after_prompt(session, prompt: torch.Tensor, max_new_tokens: int, sampler: Sampler = greedy) -> Generation:
    """generate's cached loop on a session that holds the prompt (B, T) but its last token (session.fill):
    every new token is one step, the first one the prompt's last token's, so that a decode's time is its
    steps' alone, and one step's package serves every prompt length."""
    last, start = own_rows(prompt[:, -1:]), prompt.size(1) - 1
    return _decode_loop(lambda tokens, _, sequence: session.step(last, start)[:, -1],
                        lambda token, position, sequence: session.step(token, position)[:, -1],
                        prompt, max_new_tokens, sampler, False)


def _decode_loop(prefill, step, prompt, max_new_tokens, sampler, keep_logits) -> Generation:
    """prefill and step(new tokens (B, T), their start position, the sequence so far) -> next logits (B, V):
    prefill runs the prompt, step each new token after it."""
    sequence = torch.empty(prompt.size(0), prompt.size(1) + max_new_tokens, dtype=torch.long,
                           device=prompt.device)
    sequence[:, : prompt.size(1)] = prompt
    kept: list[torch.Tensor] | None = [] if keep_logits else None
    position = prompt.size(1)
    logits = prefill(prompt, 0, prompt)
    for index in range(max_new_tokens):
        token = sampler(logits)
        sequence[:, position] = token
        if kept is not None:
            kept.append(logits)
        position += 1
        if index + 1 == max_new_tokens:
            break
        logits = step(token.view(-1, 1), position - 1, sequence[:, :position])
    return Generation(sequence, kept)
