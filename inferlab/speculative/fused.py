"""A whole speculative round, and a sampled decode step, as single graphs for the compiled engine.

Run as k + 1 compiled calls with eager softmax, sampling and a Python accept loop between them,
a round would pay the fixed cost of a call and a host sync k + 1 times. Here the k draft steps, the
(k+1)-row verification and the accept/resample rule are one function that the engine runs as one
package per (target, draft, k, context bucket); the emitted tokens, m and the per-position overlaps
come back in one tensor, so a round syncs with the host once.

The rule is the exact one of inferlab.speculative.decode.verify_sampled (both use residual_probs
and overlap, defined here): accept draft token x
when u * q(x) < p(x), replace the first rejection with a draw from norm(max(0, p - q)), and
take a bonus token from p when all k pass. Randomness is drawn on the host, 2k + 1 uniforms
per round from the job's torch.Generator, and every draw is an inverse-CDF lookup, so runs
are reproducible; the draws differ from the eager reference's torch.multinomial stream, not
in distribution. Greedy decoding is a tensor flag of the same graph (argmax instead of draws,
equality instead of the ratio test), so the greedy-identity check runs the same kernels.

Shapes stay static: the first draft forward always feeds the last two tokens of the sequence
(positions n-2 and n-1). The draft's cache is valid up to n-3 after any round, so recomputing
n-2 when it was already valid costs one row and spares a second graph for the other case.
"""

from __future__ import annotations

import torch

from inferlab.core.model import GPT
from inferlab.core.sampler import logits_to_probs
from inferlab.core.static_forward import static_forward

# The draft's forwards (2 rows, then 1 each step) run through the C++ GEMM template over its frozen
# weights in a round of k <= TEMPLATE_DRAFT_MAX_K, and as reductions (static_forward.rows_times_weight)
# beyond: the template's rounds run faster, but each draft step's template kernels are C++ of their
# own, so its compile time grows about twice as fast with k. From k = 3 on the template's gain shrinks
# while its compile time more than doubles, so those rounds keep the reductions (docs/engines.md).
TEMPLATE_DRAFT_MAX_K = 2
REDUCTION_ROWS = 2  # gemv_max_rows that makes both of a draft's row counts reductions


def draft_gemv_max_rows(k: int) -> int:
    """static_forward's gemv_max_rows for the draft's forwards in a round of k draft steps."""
    return 0 if k <= TEMPLATE_DRAFT_MAX_K else REDUCTION_ROWS


def draft_forward_form(k: int) -> str:
    """What a round of k draft steps runs its draft's projections as, by the name Experiment 3's tables
    give it: what one more draft step costs is a property of the form, so it is fitted within one."""
    return "template GEMMs" if draft_gemv_max_rows(k) == 0 else "reductions"


def inverse_cdf_draw(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The token whose cumulative-mass interval holds uniform * total (uniform in [0, 1)).

    Counting the entries with cumulative mass <= u skips zero-probability tokens (their
    interval is empty), which torch.multinomial also never returns.
    """
    cumulative = probs.cumsum(-1)
    index = (cumulative <= uniform.unsqueeze(-1) * cumulative[..., -1:]).sum(-1)
    return index.clamp(max=probs.size(-1) - 1)


def overlap(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_x min(p, q) over the last axis: the probability that a draft token is accepted."""
    return torch.minimum(p, q).sum(dim=-1)


def residual_probs(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the last axis, the distribution a rejection is replaced from.

    Its mass is 1 - sum min(p, q) and is zero only when p == q, where a rejection cannot
    happen in exact arithmetic; rounding can still cause one, and then p itself is right.
    Written without a branch on the mass, so the reference round and the fused graph share it.
    """
    residual = torch.clamp(p - q, min=0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass, p)


def draft_proposals(draft: GPT, draft_caches: tuple[list, list], last_two: torch.Tensor, n: torch.Tensor,
                    uniforms: torch.Tensor, greedy: torch.Tensor, temperature: float, top_p: float,
                    context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft half of a round: k tokens, each drawn (or taken by argmax) from the draft's
    distribution after the one before, with uniforms[:k]. Returns the tokens (k,) and q (k, V)."""
    # Unrolled, so compile time grows with k. As a torch.while_loop the round compiled faster, but each
    # step ran slower (the loop re-wraps every captured tensor and allocates its buffers each
    # iteration): docs/engines.md.
    k = (uniforms.size(0) - 1) // 2
    gemv_max_rows = draft_gemv_max_rows(k)
    tokens_in, positions = last_two, n - 2 + torch.arange(2)
    drafts, draft_probs = [], []
    for i in range(k):
        logits = static_forward(draft, tokens_in, positions, *draft_caches, gemv_max_rows=gemv_max_rows,
                                context=context)[0, -1]
        q = logits_to_probs(logits, temperature=temperature, top_p=top_p)
        token = torch.where(greedy, logits.argmax(-1), inverse_cdf_draw(q, uniforms[i]))
        drafts.append(token)
        draft_probs.append(q)
        tokens_in, positions = token.view(1, 1), n + i
    return torch.stack(drafts), torch.stack(draft_probs)


def proposals_only(draft: GPT, draft_caches: tuple[list, list], last_two: torch.Tensor, n: torch.Tensor,
                   uniforms: torch.Tensor, greedy: torch.Tensor, temperature: float, top_p: float,
                   context: int) -> torch.Tensor:
    """draft_proposals as a graph of its own, to time what a round's draft half costs inside one
    graph (no call per step); returns the k tokens as float32, like the round's first k values."""
    drafted, _ = draft_proposals(draft, draft_caches, last_two, n, uniforms, greedy, temperature, top_p, context)
    return drafted.float()


def speculative_round(target: GPT, draft: GPT, target_caches: tuple[list, list], draft_caches: tuple[list, list],
                      last_two: torch.Tensor, n: torch.Tensor, uniforms: torch.Tensor, greedy: torch.Tensor,
                      temperature: float, top_p: float, context: int) -> torch.Tensor:
    """One round for a sequence of n tokens whose last two are last_two (1, 2); n is a (1,) tensor.
    Every forward attends over the first `context` slots (the bucket that holds position n + k - 1).

    uniforms (2k + 1,): k for the draft draws, k for the accept tests, one for the replacement
    or bonus token. Returns float32 (2k + 2,): the k draft tokens, m, the token emitted after
    the m accepted ones, and sum_x min(p, q) at each of the k draft positions.
    """
    k = (uniforms.size(0) - 1) // 2
    drafted, q = draft_proposals(draft, draft_caches, last_two, n, uniforms, greedy, temperature, top_p, context)
    verify_in = torch.cat([last_two[0, 1:], drafted]).view(1, k + 1)
    target_logits = static_forward(target, verify_in, n - 1 + torch.arange(k + 1), *target_caches, context=context)[0]
    p = logits_to_probs(target_logits, temperature=temperature, top_p=top_p)  # (k + 1, V)
    p_x = p[:k].gather(1, drafted.view(k, 1))[:, 0]
    q_x = q.gather(1, drafted.view(k, 1))[:, 0]
    best = target_logits.argmax(-1)  # (k + 1,)
    accepted = torch.where(greedy, drafted == best[:k], uniforms[k:2 * k] * q_x < p_x)
    m = torch.cat([~accepted, torch.ones(1, dtype=torch.bool)]).int().argmax()  # first rejection, or k
    replacement = torch.cat([residual_probs(p[:k], q), p[k:]])  # row m: after a rejection at m, or the bonus
    # row m by gather, not replacement[m]: an index taken from a tensor would leave the graph
    row = replacement.gather(0, m.view(1, 1).expand(1, replacement.size(-1)))[0]
    next_token = torch.where(greedy, best.gather(0, m.view(1))[0], inverse_cdf_draw(row, uniforms[2 * k]))
    overlaps = overlap(p[:k], q)
    return torch.cat([drafted.float(), m.float().view(1), next_token.float().view(1), overlaps])


def sampled_step(model: GPT, caches: tuple[list, list], token: torch.Tensor, position: torch.Tensor,
                 uniform: torch.Tensor, greedy: torch.Tensor, temperature: float, top_p: float,
                 context: int) -> torch.Tensor:
    """Target-only decoding's step on the same terms: one forward at `position` (1,) over the first
    `context` slots and its draw (or argmax) in one graph. Returns the next token, a 0-dim long tensor."""
    logits = static_forward(model, token, position, *caches, context=context)[0, -1]
    probs = logits_to_probs(logits, temperature=temperature, top_p=top_p)
    return torch.where(greedy, logits.argmax(-1), inverse_cdf_draw(probs, uniform))
