"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023), batch 1, in the gpt-fast style.

A small draft model proposes k tokens one at a time from q; the target scores the last
accepted token plus the k drafts in ONE forward, giving p at every draft position and one
more. Draft token x is accepted with probability min(1, p(x)/q(x)); the first rejection is
replaced by a sample from norm(max(0, p - q)); when all k pass, a bonus token comes from p.
The emitted tokens are then distributed exactly as target-only sampling.

Bookkeeping of the caches (both are indexed by absolute position and the valid prefix is
whatever the caller's input_pos says, see inferlab.core.model.KVCache):

- The sequence has n tokens. The target's cache is valid for positions 0..n-2; the last
  token is "pending" and is the first input of the next verification forward.
- The draft is valid for 0..n-2 as well, or for 0..n-3 after a round in which all k drafts
  were accepted: the draft never ran its own k-th proposal. Instead of a separate catch-up
  forward (gpt-fast does one) the next round feeds both pending tokens in its first draft
  forward, so every round costs exactly k draft forwards and one target forward.
- Rolling back after a rejection is therefore nothing but continuing to write at the right
  position: entries past the valid prefix are masked out and overwritten later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch

from inferlab.core.engine import Engine, model_label, own_rows
from inferlab.core.model import GPT
from inferlab.core.sampler import logits_to_probs
from inferlab.core.static_forward import context_bucket
from inferlab.speculative.forwards import close_sessions, open_sessions, prefilled_session
from inferlab.speculative.fused import overlap, proposals_only, residual_probs, sampled_step, speculative_round


@dataclass(frozen=True)
class SamplingSettings:
    """Applied identically to the target's p and the draft's q. greedy=True means T -> 0."""

    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, temperature=self.temperature, top_p=self.top_p)


@dataclass
class SpeculativeStats:
    """Counters of one speculative generation; prefills are not counted as forwards."""

    rounds: int = 0
    target_forwards: int = 0   # verification forwards, one per round
    draft_forwards: int = 0    # k per round
    drafted: int = 0           # draft tokens generated, k per round
    proposed: int = 0          # draft tokens that reached the accept test (accepted + rejected)
    accepted: int = 0
    generated: int = 0         # tokens emitted by the rounds, before truncation to max_new_tokens
    overlap_sum: float = 0.0   # sum over proposed positions of sum_x min(p, q): expected accepts
    overlap_sum_drafted: float = 0.0  # the same over all drafted positions
    accepted_per_round: list[int] = field(default_factory=list)
    prefill_ms: float = 0.0    # wall time caching the prompt in both models, before the first round


@dataclass
class SpeculativeResult:
    tokens: torch.Tensor       # (1, T_prompt + max_new_tokens)
    stats: SpeculativeStats

    def new_tokens(self, prompt_len: int) -> list[int]:
        return self.tokens[0, prompt_len:].tolist()


# --------------------------------------------------------------------------- the accept rule

def sample_from(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One id from a (V,) distribution."""
    return int(torch.multinomial(probs, 1, generator=generator))


def verify_sampled(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
                   generator: torch.Generator | None) -> tuple[int, int]:
    """The exact accept/reject rule for one round.

    target_probs: (k+1, V), row i is p at the position of draft token i (row k: the bonus);
    draft_probs: (k, V) the q each draft token was sampled from; draft_tokens: (k,).
    Returns (number accepted m in 0..k, the token emitted after them).
    """
    k = draft_tokens.numel()
    for i in range(k):
        x = int(draft_tokens[i])
        p_x, q_x = float(target_probs[i, x]), float(draft_probs[i, x])
        u = float(torch.rand((), generator=generator))
        # accept with probability min(1, p/q); u < p/q written without the division
        if u * q_x < p_x:
            continue
        return i, sample_from(residual_probs(target_probs[i], draft_probs[i]), generator)
    return k, sample_from(target_probs[k], generator)


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[int, int]:
    """Greedy rule: accept while the draft token is the target's argmax, then take the argmax.

    target_logits: (k+1, V); draft_tokens: (k,). Returns (accepted, next token).
    """
    best = target_logits.argmax(dim=-1)  # (k+1,)
    k = draft_tokens.numel()
    matches = (best[:k] == draft_tokens).tolist()
    m = matches.index(False) if False in matches else k
    return m, int(best[m])


# --------------------------------------------------------------------------- the decode loop

def _forward(session, tokens: list[int], start: int) -> torch.Tensor:
    """Cached forward of tokens at positions start.. on an engine session; returns logits (T, V)."""
    return session.forward(torch.tensor([tokens], dtype=torch.long), start)[0]


def _prefill_all_but_last(sessions: list, prompt: list[int]) -> float:
    """Caches the prompt except its last token, which stays pending for the first round; returns the
    ms it took. A decode's wall time includes its prefill, which a round's breakdown names apart; on the
    compiled engine it is a package of its own per prompt length (the compile rules build one for every
    configured prompt), and it is no part of what a round costs."""
    start = time.perf_counter()
    if len(prompt) > 1:
        for session in sessions:
            _forward(session, prompt[:-1], 0)
    return (time.perf_counter() - start) * 1e3


def _draft_propose(draft, seq: list[int], draft_valid: int, k: int, settings: SamplingSettings,
                   generator: torch.Generator | None) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """k draft tokens; the first forward feeds every token the draft's cache lacks (1 or 2).

    Returns (tokens, logits (k, V), probs (k, V); probs is empty in greedy mode).
    """
    pending, start = seq[draft_valid:], draft_valid
    tokens: list[int] = []
    logits_rows, prob_rows = [], []
    for _ in range(k):
        logits = _forward(draft, pending, start)[-1]  # (V,)
        if settings.greedy:
            token = int(logits.argmax())
        else:
            probs = settings.probs(logits)
            token = sample_from(probs, generator)
            prob_rows.append(probs)
        logits_rows.append(logits)
        tokens.append(token)
        start += len(pending)
        pending = [token]
    probs_out = torch.stack(prob_rows) if prob_rows else torch.empty(0)
    return tokens, torch.stack(logits_rows), probs_out


@dataclass(frozen=True)
class Round:
    """What one round decided: k drafts, m accepted, the token after them, and sum_x min(p, q)
    at each draft position (empty in greedy mode)."""

    drafts: list[int]
    accepted: int
    next_token: int
    overlaps: list[float]


def _reference_round(target_session, draft_session, seq: list[int], draft_valid: int, k: int,
                     settings: SamplingSettings, generator: torch.Generator | None,
                     trace: list[dict] | None) -> Round:
    """The readable round: k draft forwards, one verification, the accept rule in Python."""
    n = len(seq)
    drafts, draft_logits, draft_probs = _draft_propose(draft_session, seq, draft_valid, k, settings, generator)
    target_logits = _forward(target_session, [seq[-1], *drafts], n - 1)  # (k+1, V)
    draft_tensor = torch.tensor(drafts)
    overlaps: list[float] = []
    if settings.greedy:
        m, next_token = verify_greedy(target_logits, draft_tensor)
    else:
        target_probs = settings.probs(target_logits)
        m, next_token = verify_sampled(target_probs, draft_probs, draft_tensor, generator)
        overlaps = overlap(target_probs[:k], draft_probs).tolist()
    if trace is not None:
        trace.append({"n": n, "drafts": drafts, "accepted": m, "next": next_token,
                      "target_logits": target_logits, "draft_logits": draft_logits})
    return Round(drafts, m, next_token, overlaps)


class FusedCalls:
    """A decode's fused graph (a round, or target-only sampling's step) on the compiled engine, bound once per
    context bucket (CompiledEngine.bind) to input tensors of its own, which each call writes in place: a call
    then costs its loader's and nothing else. The host-side inputs are written through numpy views."""

    def __init__(self, engine: Engine, fn, models: tuple[GPT, ...], label: str, caches: tuple,
                 inputs: dict[str, torch.Tensor], settings: SamplingSettings):
        self.engine, self.fn, self.models, self.label, self.caches = engine, fn, models, label, caches
        self.inputs = inputs
        self.host = {name: tensor.numpy() for name, tensor in inputs.items()}
        self.settings = (torch.tensor(settings.greedy), float(settings.temperature), float(settings.top_p))
        self.max_seq_len = models[0].config.max_seq_len
        self._bound: dict[int, object] = {}  # context bucket -> its bound call
        # end -> its bucket's run on its tensors: a call finds it in one lookup, without the bucket's arithmetic
        self._runs: dict[int, Callable] = {}

    def __call__(self, end: int) -> torch.Tensor:
        """The graph over the bucket that holds position end - 1, on the inputs as they are now."""
        return (self._runs.get(end) or self._run_of(end))()[0]

    def _run_of(self, end: int) -> Callable:
        bound = self.bind(end)
        self._runs[end] = run = partial(bound.run, bound.tensors)
        return run

    def bind(self, end: int):
        """The bound call over the bucket that holds position end - 1 (binding runs nothing: on an engine
        that builds, it builds the package)."""
        context = context_bucket(end, self.max_seq_len)
        if context not in self._bound:
            self._bound[context] = self.engine.bind(self.fn, self.models, f"{self.label}:S{context}", *self.caches,
                                                    *self.inputs.values(), *self.settings, context)
        return self._bound[context]

    def bind_every_bucket(self, first_end: int, last_end: int) -> None:
        """Binds the buckets of every end from first_end to last_end: all a decode can reach, whatever its
        seed, so that the compile rules build them all."""
        for end in range(first_end, last_end + 1):
            self.bind(end)


def fused_rounds(engine: Engine, target_session, draft_session, k: int, settings: SamplingSettings) -> FusedCalls:
    """speculative_round bound for one decode: inputs last_two (1, 2), n (1,), uniforms (2k + 1,)."""
    inputs = {"last_two": torch.zeros(1, 2, dtype=torch.long), "n": torch.zeros(1, dtype=torch.long),
              "uniforms": torch.zeros(2 * k + 1)}
    return FusedCalls(engine, speculative_round, (target_session.model, draft_session.model),
                      f"round:{model_label(draft_session.model)}:k{k}",
                      ((target_session.k_caches, target_session.v_caches),
                       (draft_session.k_caches, draft_session.v_caches)), inputs, settings)


def _fused_round(rounds: FusedCalls, seq: list[int], k: int, settings: SamplingSettings,
                 generator: torch.Generator | None) -> Round:
    """The same round as one compiled graph (inferlab.speculative.fused), one host sync."""
    host = rounds.host
    host["last_two"][0] = seq[-2:]
    host["n"][0] = len(seq)
    torch.rand(2 * k + 1, generator=generator, out=rounds.inputs["uniforms"])
    out = rounds(len(seq) + k).tolist()
    m = int(out[k])
    return Round([int(t) for t in out[:k]], m, int(out[k + 1]), [] if settings.greedy else out[k + 2:])


@torch.no_grad()
def speculative_decode(target: GPT, draft: GPT, prompt: list[int], max_new_tokens: int, k: int,
                       settings: SamplingSettings = SamplingSettings(),
                       generator: torch.Generator | None = None,
                       trace: list[dict] | None = None, engine: Engine | None = None) -> SpeculativeResult:
    """Generates max_new_tokens after prompt with draft proposals of length k.

    The last round may overshoot; the output is cut to max_new_tokens, the counters are not
    (so tokens per round stays an unbiased sample of the formula's E). When trace is a list,
    each round appends its context length n, drafts and the raw logits of both models, which
    lets tests compare the cached logits with a fresh full forward. `engine` runs both models'
    forwards (eager when None). An engine that runs fused rounds (the compiled one) does each
    round as one graph (inferlab.speculative.fused) unless a trace is asked for, and for a
    first round with a one-token sequence, which runs the reference round on its steps.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not prompt:
        raise ValueError("the prompt must hold at least one token")
    if draft is target:
        raise ValueError("the draft must be a separate module: each model owns its KV cache")
    fused = engine is not None and engine.runs_fused_rounds and trace is None
    if fused and draft.config.max_seq_len != target.config.max_seq_len:
        # one context bucket slices both models' caches inside the round's graph
        raise ValueError(f"a fused round needs the draft's context ({draft.config.max_seq_len}) to equal the "
                         f"target's ({target.config.max_seq_len}); run this pair on the eager engine")
    target_session, draft_session = sessions = open_sessions(engine, [target, draft], len(prompt) + max_new_tokens + k)
    try:
        stats = SpeculativeStats(prefill_ms=_prefill_all_but_last(sessions, prompt))
        rounds = fused_rounds(engine, target_session, draft_session, k, settings) if fused else None
        seq = list(prompt)
        draft_valid = len(seq) - 1
        while len(seq) - len(prompt) < max_new_tokens:
            n = len(seq)
            if fused and n >= 2:
                step = _fused_round(rounds, seq, k, settings, generator)
            else:
                step = _reference_round(target_session, draft_session, seq, draft_valid, k, settings,
                                        generator, trace)
            m = step.accepted
            checked = min(m + 1, k)  # positions that went through the accept test
            stats.overlap_sum += sum(step.overlaps[:checked])
            stats.overlap_sum_drafted += sum(step.overlaps)
            seq.extend(step.drafts[:m])
            seq.append(step.next_token)
            # The draft has cached up to its (k-1)-th proposal, position n+k-2.
            draft_valid = min(n + k - 1, len(seq) - 1)
            stats.rounds += 1
            stats.target_forwards += 1
            stats.draft_forwards += k
            stats.drafted += k
            stats.proposed += checked
            stats.accepted += m
            stats.generated += m + 1
            stats.accepted_per_round.append(m)
        tokens = torch.tensor([seq[: len(prompt) + max_new_tokens]])
        return SpeculativeResult(tokens, stats)
    finally:
        close_sessions(sessions)


def sampled_steps(engine: Engine, session, settings: SamplingSettings) -> FusedCalls:
    """sampled_step bound for one decode: inputs token (1, 1), position (1,), uniform ()."""
    inputs = {"token": torch.zeros(1, 1, dtype=torch.long), "position": torch.zeros(1, dtype=torch.long),
              "uniform": torch.zeros(())}
    return FusedCalls(engine, sampled_step, (session.model,), f"step:{model_label(session.model)}",
                      ((session.k_caches, session.v_caches),), inputs, settings)


def _next_token(steps: FusedCalls | None, session, seq: list[int], settings: SamplingSettings,
                generator: torch.Generator | None) -> int:
    """Target-only decoding's step: one forward and its draw, fused into one graph on an engine
    that runs fused rounds (steps), so the baseline pays the same per-call costs as the rounds."""
    if steps is not None:
        steps.host["token"][0, 0] = seq[-1]
        steps.host["position"][0] = len(seq) - 1
        torch.rand((), generator=generator, out=steps.inputs["uniform"])
        return int(steps(len(seq)))
    logits = _forward(session, [seq[-1]], len(seq) - 1)[-1]
    if settings.greedy:
        return int(logits.argmax())
    return sample_from(settings.probs(logits), generator)


@torch.no_grad()
def autoregressive_decode(model: GPT, prompt: list[int], max_new_tokens: int,
                          settings: SamplingSettings = SamplingSettings(),
                          generator: torch.Generator | None = None, engine: Engine | None = None,
                          timings: dict[str, float] | None = None) -> torch.Tensor:
    """Plain target-only decoding with the same prefill convention and sampling code as
    speculative_decode, on the same engine: the wall-clock baseline. Returns tokens (1, T_prompt + n);
    a `timings` dict receives the prefill's ms under "prefill_ms"."""
    sessions = open_sessions(engine, [model], len(prompt) + max_new_tokens)
    try:
        prefill_ms = _prefill_all_but_last(sessions, prompt)
        if timings is not None:
            timings["prefill_ms"] = prefill_ms
        seq = list(prompt)
        steps = sampled_steps(engine, sessions[0], settings) if engine is not None and engine.runs_fused_rounds \
            else None
        for _ in range(max_new_tokens):
            seq.append(_next_token(steps, sessions[0], seq, settings, generator))
        return torch.tensor([seq])
    finally:
        close_sessions(sessions)


# --------------------------------------------------------------------------- forward timing

@contextmanager
def draft_half_call(draft: GPT, context: int, k: int, settings: SamplingSettings, engine: Engine | None = None):
    """A fused round's draft half after `context` tokens, as a call to time: its k draft steps and
    draws as one graph (inferlab.speculative.fused.proposals_only), so what the round pays for its
    drafts without a call per step; it returns the k tokens as a float tensor. Only on an engine that
    runs fused rounds."""
    if engine is None or not engine.runs_fused_rounds:
        raise ValueError("a round's draft half is its own graph only on an engine that runs fused rounds")
    # a round finds the draft valid up to n - 3
    with torch.no_grad(), prefilled_session(engine, draft, context, context - 2,
                                             capacity=context + k) as (session, ids, gen):
        caches = (session.k_caches, session.v_caches)
        bucket = context_bucket(context + k, draft.config.max_seq_len)
        args = (caches, own_rows(ids[:, context - 2:]), torch.tensor([context]), torch.rand(2 * k + 1, generator=gen),
                torch.tensor(settings.greedy), float(settings.temperature), float(settings.top_p), bucket)
        label = f"draft_half:{model_label(draft)}:k{k}:S{bucket}"
        yield engine.bind(proposals_only, (draft,), label, *args)

