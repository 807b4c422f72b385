"""The compiled engine's forward on static buffers: the same weights and arithmetic as
``GPT.forward``, written so that no shape depends on the position and inductor can fuse it.

``static_forward`` is what ``inferlab.core.engine.CompiledEngine`` compiles per token count and
context bucket, and what a fused speculative round (``inferlab.speculative.fused``) calls inside
its one graph; ``full_forward`` is the uncached forward without Python-level checks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inferlab.core.model import GPT, apply_rope

# Up to this many rows (batch x tokens) the projections run as reductions (gemv_linear). They beat
# unfrozen GEMM at 1-2 rows, but they hide the products from inductor, and frozen weights with the
# C++ GEMM template beat them at every row count (DEFAULT_INDUCTOR_OPTIONS; docs/engines.md): 0, off.
GEMV_MAX_ROWS = 0
# Up to this many rows attention is masked products and sums over the whole buffer: SDPA's fixed
# cost per call was larger at every row count of a decode step or a verification (k + 1 <= 9).
# A prompt runs eagerly and keeps SDPA, where the products would materialise (T, S, head) per head.
ATTENTION_REDUCTION_MAX_ROWS = 16


# A compiled forward attends over a context bucket, not the whole buffer: the smallest of
# max_seq_len / 4, / 2 and / 1 that holds every position it writes (each bucket is a graph of its
# own), so that an early step does not pay for attending over empty slots (docs/engines.md).
# Generations of Experiment 3 (under 128 tokens) stay in the first bucket: no more graphs to compile.
CONTEXT_BUCKET_DIVISORS = (4, 2, 1)


def context_bucket(end: int, max_seq_len: int) -> int:
    """The slots a forward writing positions below `end` attends over."""
    for divisor in CONTEXT_BUCKET_DIVISORS:
        if end <= max_seq_len // divisor:
            return max_seq_len // divisor
    raise ValueError(f"position {end - 1} exceeds the context {max_seq_len}")


def rows_times_weight(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ weight (N, K).T for a few rows, as elementwise products summed over K.

    MKL's GEMM runs a matrix-vector product far below the memory bandwidth. Written as a reduction,
    inductor emits one vectorised loop per projection. The sum runs over the weight transposed to
    (K, N), so that the loop is vectorised along N with one accumulator per output lane, not along K
    with a horizontal sum per output, which made the draft's forwards faster (docs/engines.md); with
    frozen weights the transposed copy is a constant, made once at compile time.
    """
    return (x.unsqueeze(-1).float() * weight.t().contiguous().float()).sum(-2)


def gemv_linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A bias-free nn.Linear as rows_times_weight; any other module, such as the quantised
    kernels of Experiment 4, keeps its own forward."""
    if type(module) is not nn.Linear or module.bias is not None:
        return module(x)
    return rows_times_weight(x, module.weight).to(x.dtype)


def masked_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """Softmax attention of q (B, nh, T, hs) over every buffer slot (B, nh, S, hs) under mask (T, S).

    As products and sums rather than SDPA: for a few queries the CPU flash kernel's fixed cost per
    call is most of the work, and inductor fuses this form into two loops.
    """
    scale = q.size(-1) ** -0.5
    scores = (q.unsqueeze(-2).float() * k_cache.unsqueeze(-3).float()).sum(-1) * scale  # (B, nh, T, S)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (weights.unsqueeze(-1) * v_cache.unsqueeze(-3).float()).sum(-2).to(q.dtype)  # (B, nh, T, hs)


def _module_call(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module(x)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def static_forward(model: GPT, idx: torch.Tensor, input_pos: torch.Tensor,
                   k_caches: list[torch.Tensor], v_caches: list[torch.Tensor],
                   gemv_max_rows: int = GEMV_MAX_ROWS, context: int | None = None) -> torch.Tensor:
    """GPT.forward on static buffers. idx (B, T); input_pos (T,) long; caches (B, nh, S, hs).

    The same weights and the same arithmetic as GPT.forward, except:
      1. this forward's keys/values are written at input_pos (index_copy_, in place);
      2. attention covers the first `context` buffer slots (all S when None; every input_pos
         must lie below it), masking key positions beyond each query's position, so slots left
         from an earlier, rejected speculation are never seen;
      3. for at most ATTENTION_REDUCTION_MAX_ROWS rows (batch x tokens: the decode step, the
         draft's catch-up, a verification), attention is written as masked products and sums
         (masked_attention), which inductor fuses; a prompt keeps SDPA. Projections are
         nn.Linear (GEMM), or reductions (gemv_linear) for at most GEMV_MAX_ROWS rows.
    Returns logits (B, T, V) float32.
    """
    B, T = idx.shape
    few_rows = B * T <= gemv_max_rows
    project = gemv_linear if few_rows else _module_call
    attend = masked_attention if B * T <= ATTENTION_REDUCTION_MAX_ROWS else _sdpa
    cos, sin = model.rope_cos[input_pos], model.rope_sin[input_pos]
    slots = k_caches[0].size(2) if context is None else context
    key_pos = torch.arange(slots, device=idx.device)
    mask = key_pos[None, :] <= input_pos[:, None]  # (T, slots)
    x = model.tok_emb(idx)
    for block, k_cache, v_cache in zip(model.blocks, k_caches, v_caches, strict=True):
        attn = block.attn
        h = block.attn_norm(x)
        C = h.size(-1)
        q, k, v = project(attn.qkv, h).split(C, dim=2)
        q, k, v = (t.view(B, T, attn.n_head, attn.head_dim).transpose(1, 2) for t in (q, k, v))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k_cache.index_copy_(2, input_pos, k.to(k_cache.dtype))
        v_cache.index_copy_(2, input_pos, v.to(v_cache.dtype))
        y = attend(q, k_cache[:, :, :slots].to(q.dtype), v_cache[:, :, :slots].to(q.dtype), mask)
        x = x + project(attn.proj, y.transpose(1, 2).contiguous().view(B, T, C))
        mlp = block.mlp
        x = x + project(mlp.down, F.gelu(project(mlp.up, block.mlp_norm(x))))
    x = model.final_norm(x)
    if few_rows:
        return rows_times_weight(x, model.tok_emb.weight)
    return F.linear(x, model.tok_emb.weight).float()


def full_forward(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """GPT.forward without a cache and without its Python-level checks (they break a graph):
    causal attention over idx (B, T) from position 0. Returns the last logits (B, V)."""
    T = idx.size(1)
    cos, sin = model.rope_cos[:T], model.rope_sin[:T]
    x = model.tok_emb(idx)
    for block in model.blocks:
        attn = block.attn
        h = block.attn_norm(x)
        B, _, C = h.shape
        q, k, v = attn.qkv(h).split(C, dim=2)
        q, k, v = (t.view(B, T, attn.n_head, attn.head_dim).transpose(1, 2) for t in (q, k, v))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + attn.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        x = x + block.mlp(block.mlp_norm(x))
    # the head over every position, as GPT.forward does: the FLOP model of Experiment 1 counts it
    x = model.final_norm(x)
    return F.linear(x, model.tok_emb.weight).float()[:, -1]
