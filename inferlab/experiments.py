"""The experiments as the report and the review see them: display names of every column.

Torch-free and import-light: the report rule reads it at parse time, and both inferlab.report and
inferlab.review import it.
"""

from __future__ import annotations

DISPLAY_NAMES = {
    # identity and setup
    "engine": "engine", "engine_used": "engine used", "model": "model", "run": "run", "seed": "seed",
    "device": "device", "threads": "threads", "precision": "precision", "steps": "steps", "params": "parameters",
    "draft": "draft model", "k": "k (drafted tokens)", "scheme": "scheme", "method": "method",
    "granularity": "granularity", "bits": "bits", "cell": "cell", "prompt": "prompt", "sample": "sample",
    "text": "text", "mode": "mode", "length": "length (tokens)", "context_tokens": "context (tokens)",
    "subject": "subject", "criterion": "criterion", "row": "row", "rank": "rank", "source": "source",
    "description": "description", "field": "field", "quantity": "quantity", "value": "value",
    "reps": "reruns", "n_runs": "runs", "cases": "cases", "identical": "identical", "range": "range",
    "std": "standard deviation", "contended": "contended", "experiment": "experiment", "metric": "metric",
    "key": "key", "noise": "noise kind", "old": "old", "new": "new", "verdict": "verdict", "op": "operator",
    "temperature": "temperature", "top_p": "top-p", "min_p": "min-p", "truncation": "truncation",
    "eligible": "eligible", "chosen": "chosen", "overall_choice": "overall choice", "difference": "difference",
    # KV cache and roofline
    "ms_per_token": "ms/token", "ms_per_token_median": "ms/token (median)", "ms_per_token_min": "ms/token (min)",
    "ms_per_token_max": "ms/token (max)", "total_ms_median": "total ms (median)", "ratio": "ratio (×)",
    "ratio_min": "ratio min (×)", "ratio_max": "ratio max (×)", "a_ms": "fixed cost a (ms)",
    "a_cache_ms": "cached step a (ms)", "b_ms_per_position": "per-position cost b (ms)", "r2": "R²",
    "predicted_ratio": "predicted ratio (×)", "prediction_error": "prediction error",
    "fixed_share_no_cache": "fixed share, no cache", "flop_estimate_ratio": "FLOP-estimate ratio (×)",
    "kv_bytes_per_token": "KV bytes/token", "bytes_per_token": "bytes/token",
    "lower_bound_ms_per_token": "lower bound (ms/token)", "memory_bound_ms_per_token": "memory bound (ms/token)",
    "compute_bound_ms_per_token": "compute bound (ms/token)", "measured_over_bound": "measured / bound (×)",
    "upper_bound_tokens_per_s": "upper bound (tokens/s)", "limited_by": "limited by", "op_ms": "operator ms",
    "op_ms_per_step": "operator ms/step", "op_share": "share of step",
    "split_step_ms": "step with kernel events (ms)", "entry_ms": "Python around the package's call (ms)",
    "graph_code_ms": "package code between kernels (ms)", "kernel_ms": "kernels (ms)", "kernel_events": "kernels",
    "same_output_all": "same output (all reruns)",
    # sampling
    "entropy_bits": "entropy (bits)", "entropy_nats": "entropy (nats)", "kept": "tokens kept",
    "seq_rep_4": "4-gram repetition", "seq_rep_4_ci_low": "4-gram repetition CI low",
    "seq_rep_4_ci_high": "4-gram repetition CI high", "distinct_1": "distinct-1", "distinct_2": "distinct-2",
    "in_corpus_4gram_share": "in-corpus 4-gram share", "in_corpus_4gram_share_ci_low": "in-corpus 4-gram CI low",
    "in_corpus_4gram_share_ci_high": "in-corpus 4-gram CI high", "nll_per_token": "NLL/token (nats)",
    "zipf_coefficient": "Zipf coefficient", "distance": "distance to human text",
    "distance_ci_low": "distance CI low", "distance_ci_high": "distance CI high",
    "term_seq_rep_4": "term: 4-gram repetition", "term_distinct_2": "term: distinct-2",
    "term_in_corpus_4gram_share": "term: in-corpus 4-grams", "term_nll_per_token": "term: NLL/token",
    "term_zipf_coefficient": "term: Zipf coefficient", "sigmas": "σ away",
    # speculative
    "alpha": "α (acceptance)", "c_params": "c (params ratio)", "c_time": "c (time ratio)",
    "accepted": "accepted", "proposed": "proposed", "target_forwards": "target forwards",
    "tokens_per_target_forward": "tokens/target forward",
    "formula_tokens_per_target_forward": "tokens/target forward (formula)", "formula_rel_error": "formula error",
    "speedup_theory_params": "speedup, theory by params (×)", "speedup_theory_time": "speedup, theory by time (×)",
    "wall_speedup": "wall-clock speedup (×)", "wall_speedup_min": "wall-clock speedup min (×)",
    "wall_speedup_max": "wall-clock speedup max (×)", "wall_ms": "wall ms", "overlap_mean": "overlap (mean)",
    "verify_cost_ratio": "verification cost (steps)", "round_ms": "ms per round",
    "round_draft_ms": "draft steps (ms/round)", "round_verify_ms": "verification (ms/round)",
    "round_prefill_ms": "prefill per round (ms)", "round_rest_ms": "rest of a round (ms)",
    "draft_step_in_round_ms": "draft step in a round (ms)",
    "wall_speedup_without_prefill": "wall-clock speedup, rounds alone (×)",
    "c_time_in_round": "c in a round (time ratio)", "drafts_in_one_graph": "drafts as one graph",
    "speedup_at_bound": "speedup at the roofline (×)", "verify_bound_ratio": "verification at the bound (steps)",
    "runner_up_draft": "runner-up draft", "runner_up_k": "runner-up k", "runner_up_value": "runner-up value",
    # quantization, noise floor, models
    "delta_loss": "Δ loss (nats)", "kl_mean_nats": "KL (nats/token)", "top1_agreement": "top-1 agreement",
    "effective_bits_per_weight": "bits/weight (effective)", "speedup_vs_fp32": "speed vs fp32 (×)",
    "speed_status": "speed", "within_noise": "within noise", "fp32_loss": "fp32 loss (nats)",
    "noise_floor": "noise floor (nats)", "floor": "floor (nats)", "floor_fixed": "floor, fixed (nats)",
    "floor_measured": "floor, measured (nats)", "floor_reliable": "floor reliable",
    "floor_reliability_note": "floor reliability", "floor_source": "floor source", "loss": "loss (nats)",
    "val_loss": "val loss (nats)", "tokens_seen": "tokens seen", "tokens_per_s": "tokens/s",
    "weights_sha256": "weights sha256", "train_seconds": "train s",
}

_UNIT_SUFFIXES = (("_ms", " (ms)"), ("_nats", " (nats)"), ("_bits", " (bits)"), ("_pct", " (%)"),
                  ("_GB_per_s", " (GB/s)"), ("_per_s", " per s"))


def display_name(column) -> str:
    """The reader's name of a column: listed, else spelled out (underscores to spaces, units bracketed)."""
    name = str(column)
    if name in DISPLAY_NAMES:
        return DISPLAY_NAMES[name]
    for suffix, unit in _UNIT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)].replace("_", " ") + unit
    return name.replace("_", " ")
