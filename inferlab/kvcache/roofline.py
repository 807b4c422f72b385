"""The roofline: what memory bandwidth and peak FLOP/s allow a batch-1 decode step, at best.

A decode step at batch 1 must read every weight once and the KV cache of the context, and
do ~2 FLOPs per weight plus attention. So the time per token is at least
max(bytes / bandwidth, FLOPs / peak FLOP/s), and tokens/s at most its inverse.

Two subjects: the anchor (a 27B-class dense model on an H100 SXM, described by a dict the
workflow reads from config/anchor-model.json; spec-sheet numbers, nothing is run) and our
own model on this machine, with bandwidth and FLOP/s from a short probe
(`inferlab.kvcache.probes`).
Units are in the column names: bytes, GB/s = 1e9 bytes/s, GFLOP/s = 1e9 FLOP/s.
"""

from __future__ import annotations

import pandas as pd

from inferlab.core.config import GPTConfig, dtype_bytes, kv_bytes_per_token
from inferlab.kvcache.anchor import FFN_MATRICES, validate_anchor
from inferlab.kvcache.flops import forward_flops, generation_flops

# ---------------------------------------------------------------------------- anchor


def anchor_param_counts(arch: dict) -> dict:
    """Parameter counts of a dense GQA decoder from its shape.

    matmul: weights used in a matmul for every token (attention, FFN, LM head);
    total: matmul plus the embedding table (when untied) and the RMSNorm weights.
    """
    d, hd = arch["d_model"], arch["head_dim"]
    q_width, kv_width = arch["n_head"] * hd, arch["n_kv_head"] * hd
    attention = d * q_width + 2 * d * kv_width + q_width * d  # Wq, Wk, Wv, Wo
    ffn = FFN_MATRICES[arch["ffn_kind"]] * d * arch["ffn_hidden"]
    head = arch["vocab_size"] * d
    matmul = arch["n_layer"] * (attention + ffn) + head
    norms = arch["n_layer"] * 2 * d + d
    embedding = 0 if arch["tied_embeddings"] else arch["vocab_size"] * d
    return {"matmul": matmul, "total": matmul + embedding + norms}


def anchor_kv_bytes_per_token(anchor: dict) -> int:
    """K and V, every layer, only the n_kv_head shared heads (GQA)."""
    arch = anchor["architecture"]
    return 2 * arch["n_layer"] * arch["n_kv_head"] * arch["head_dim"] * anchor["kv_cache"]["bytes_per_element"]


def bound_columns(bytes_per_token: float, flops_per_token: float, bandwidth_bytes_per_s: float,
                  flops_per_s: float) -> dict:
    """The roofline for one decode step: the slower of streaming the bytes and doing the FLOPs."""
    memory_ms = bytes_per_token / bandwidth_bytes_per_s * 1e3
    compute_ms = flops_per_token / flops_per_s * 1e3
    bound_ms = max(memory_ms, compute_ms)
    return {
        "bytes_per_token": float(bytes_per_token), "flops_per_token": float(flops_per_token),
        "arithmetic_intensity_flops_per_byte": flops_per_token / bytes_per_token,
        "bandwidth_GB_per_s": bandwidth_bytes_per_s / 1e9, "peak_GFLOP_per_s": flops_per_s / 1e9,
        "memory_bound_ms_per_token": memory_ms, "compute_bound_ms_per_token": compute_ms,
        "lower_bound_ms_per_token": bound_ms, "upper_bound_tokens_per_s": 1e3 / bound_ms,
        "limited_by": "memory" if memory_ms >= compute_ms else "compute",
    }


def anchor_roofline(anchor: dict, context_tokens: list[int]) -> pd.DataFrame:
    """One row per context length: batch-1 decode bound of the anchor on its hardware."""
    validate_anchor(anchor)
    arch, hw = anchor["architecture"], anchor["hardware"]
    counts = anchor_param_counts(arch)
    weight_bytes = counts["total"] * anchor["weights"]["bytes_per_param"]
    stated = anchor["weights"].get("stated_weight_bytes")
    if stated and abs(weight_bytes / stated - 1.0) > 0.05:
        raise ValueError(f"anchor: the architecture gives {weight_bytes / 1e9:.2f} GB of weights, "
                         f"more than 5% off the stated {stated / 1e9:.2f} GB; fix the shape or the stated size")
    kv_per_token = anchor_kv_bytes_per_token(anchor)
    rows = []
    for context in context_tokens:
        # Attention FLOPs: Q·Kᵀ and A·V over every query head, 2·head_dim each per visible key.
        attention_flops = 4.0 * arch["n_layer"] * arch["n_head"] * arch["head_dim"] * (context + 1)
        rows.append({
            "subject": "anchor", "model": anchor["name"], "machine": hw["name"], "device": hw["name"],
            "source": "spec sheet (upper bound, not run)", "params": counts["total"],
            "weight_bytes": float(weight_bytes), "stated_weight_bytes": float(stated) if stated else float("nan"),
            "kv_bytes_per_token": float(kv_per_token), "context_tokens": float(context),
            "kv_read_bytes_per_token": float(kv_per_token * (context + 1)),
            **bound_columns(weight_bytes + kv_per_token * (context + 1),
                            2.0 * counts["matmul"] + attention_flops,
                            hw["memory_bandwidth_bytes_per_s"], hw["peak_flops_per_s"]),
            "measured_over_bound": float("nan"),
        })
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- our model


def our_roofline(config: GPTConfig, params: int, weight_bytes_per_param: int, prompt_len: int, length: int,
                 bandwidth_bytes_per_s: float, flops_per_s: float, measured_ms_per_token: float,
                 model_name: str, machine: str, device: str) -> pd.DataFrame:
    """The bound for our cached generation of `length` tokens, and how far its measured ms/token is above it.

    The measured ms/token itself belongs to the KV-cache summary (key: engine, length, mode
    "cache"); only the ratio is stored here, so the number lives in one table.

    Per token, averaged over the generation's forward passes (prefill included, as in the
    timing): all weights once (the tied embedding is read whole as the head) plus the KV
    cache of the context, and the FLOPs of inferlab.kvcache.flops.generation_flops.
    """
    weight_bytes = params * weight_bytes_per_param
    kv_per_token = kv_bytes_per_token(config)
    # Cached pass j >= 1 attends P + j keys; the prefill's cache reads are counted as none.
    mean_context = sum(prompt_len + j for j in range(1, length)) / length
    bounds = bound_columns(weight_bytes + kv_per_token * mean_context,
                           generation_flops(config, prompt_len, length, use_cache=True) / length,
                           bandwidth_bytes_per_s, flops_per_s)
    return pd.DataFrame([{
        "subject": "ours", "model": model_name, "machine": machine, "device": device,
        "source": "measured probe", "params": params, "weight_bytes": float(weight_bytes),
        "stated_weight_bytes": float("nan"), "kv_bytes_per_token": float(kv_per_token),
        "context_tokens": mean_context, "kv_read_bytes_per_token": kv_per_token * mean_context, **bounds,
        "measured_over_bound": measured_ms_per_token / bounds["lower_bound_ms_per_token"],
    }])


def step_bound_ms(config: GPTConfig, params: int, position: int, rows: int, bandwidth_bytes_per_s: float,
                  flops_per_s: float) -> float:
    """The bound for one cached forward of `rows` tokens at positions position..position+rows-1: every
    weight read once (fp32) and the cache of the positions before, or the forward's FLOPs if slower."""
    read = params * dtype_bytes() + kv_bytes_per_token(config) * position
    return bound_columns(read, forward_flops(config, rows, start=position), bandwidth_bytes_per_s,
                         flops_per_s)["lower_bound_ms_per_token"]


def best_rates(probes: pd.DataFrame) -> tuple[float, float]:
    """(bandwidth bytes/s, FLOP/s) for the bound: the best any probe reached.

    The highest rate gives the lowest time, so the bound stays a lower bound even when the
    weights fit in cache and stream faster than from DRAM.
    """
    bandwidth = probes.loc[probes["unit"] == "GB/s", "value"].max() * 1e9
    flops = probes.loc[probes["unit"] == "GFLOP/s", "value"].max() * 1e9
    return float(bandwidth), float(flops)
