"""Sessions and cached forwards as Experiment 3 times them, apart from the decoders: what a model's
compile rule runs (workflow/rules/graphs.smk), so that its packages do not depend on the speculative
round's code (inferlab.speculative.fused), and an edit there rebuilds only the rounds'."""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import torch

from inferlab.core.engine import EagerEngine, Engine, own_rows
from inferlab.core.model import GPT
from inferlab.corpus.prompt import encode_prompt
from inferlab.corpus.text import Vocabulary


def encode_prompts(vocab: Vocabulary, prompts: list[str]) -> list[dict]:
    """Prompt ids plus the <unk> count (characters outside the vocabulary map to <unk>)."""
    encoded = [encode_prompt(vocab, text) for text in prompts]
    return [{"prompt_index": i, "prompt": text, "ids": ids[0].tolist(), "prompt_unk": unk}
            for i, (text, (ids, unk)) in enumerate(zip(prompts, encoded, strict=True))]


def forward_timing_context(prompts: list[dict], new_tokens: int) -> int:
    """The cached positions a group's forward timing runs after: mid-generation of the longest prompt."""
    return max(len(prompt["ids"]) for prompt in prompts) + new_tokens // 2


def open_sessions(engine: Engine | None, models: list[GPT], length: int) -> list:
    """One engine session (and KV cache) per model, batch 1, room for `length` positions."""
    for model in models:
        if length > model.config.max_seq_len:
            raise ValueError(f"prompt + new tokens + k = {length} exceeds the context {model.config.max_seq_len}")
    engine = engine or EagerEngine()
    return [engine.open(model, 1, length) for model in models]


def close_sessions(sessions: list) -> None:
    for session in sessions:
        session.close()


@contextmanager
def open_sessions_of(engine: Engine | None, models: list[GPT], length: int):
    """open_sessions, closed when the block ends."""
    sessions = open_sessions(engine, models, length)
    try:
        yield sessions
    finally:
        close_sessions(sessions)


@contextmanager
def prefilled_session(engine: Engine | None, model: GPT, n_ids: int, prefill: int, capacity: int | None = None):
    """A session of `model` whose cache holds the first `prefill` of n_ids seeded random tokens;
    yields (session, ids, the generator that drew them, to draw more from the same stream)."""
    with open_sessions_of(engine, [model], capacity or n_ids) as (session,):
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(model.config.vocab_size, (1, n_ids), generator=gen)
        if prefill:
            session.fill(ids[:, :prefill])
        yield session, ids, gen


@contextmanager
def forward_calls(model: GPT, context: int, token_counts: tuple[int, ...], engine: Engine | None = None):
    """Cached forwards of each of token_counts tokens after `context` cached positions, as calls to
    time, {n_tokens: call}. They share one session, opened and prefilled once, so every call after
    a graph's first (which loads its package on a compiled engine) is the forward alone; each rewrites the
    slots from `context` on, and attends only up to its own positions.

    n_tokens=1 is a decode step (the cost c is a ratio of these); n_tokens=k+1 is a verification."""
    with torch.no_grad(), prefilled_session(engine, model, context + max(token_counts), context) as (session, ids, _):
        yield {n: partial(session.forward, own_rows(ids[:, context:context + n]), context) for n in token_counts}


def build_forward_graphs(model: GPT, prompts: list[dict], new_tokens: int, token_counts: tuple[int, ...],
                         engine: Engine) -> None:
    """Runs once each forward of `token_counts` rows that the groups' forward timing runs on one model, and
    each prompt's prefill as the decoders run it (all of the prompt but its last token, from position 0):
    on an engine that builds, that builds their packages."""
    with forward_calls(model, forward_timing_context(prompts, new_tokens), token_counts, engine) as calls:
        for call in calls.values():
            call()
    for ids in (prompt["ids"][:-1] for prompt in prompts if len(prompt["ids"]) > 1):
        with torch.no_grad(), open_sessions_of(engine, [model], len(ids)) as (session,):
            session.forward(torch.tensor([ids], dtype=torch.long), 0)
