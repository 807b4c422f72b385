"""Experiment 4's summary and choice: the per-scheme rows in config order and the rule that picks
one scheme (torch-free: the summary job only aggregates the scheme jobs' rows)."""

from __future__ import annotations

import math

import pandas as pd

from inferlab.quant.schemes import QUALITY_ONLY, get_scheme
from inferlab.training.noise_floor import within_noise


def choice_key(row: dict) -> tuple:
    """Sort key of the rule: nominal bits, then the simpler method, then fewer effective bits."""
    return (row["bits"], get_scheme(row["scheme"]).simplicity, row["effective_bits_per_weight"],
            row["scheme"])


CHOICE_RULE = ("fewest nominal bits among schemes whose validation-loss increase is below the noise "
               "floor (delta_loss < floor; bf16 counts as 16 bits); ties go to the simpler method "
               "(per-tensor < per-channel < group < GPTQ, symmetric < asymmetric), then to fewer "
               "effective bits per weight")


def _speed_sentence(summary: pd.DataFrame) -> str:
    timed = summary[summary["speed_status"].str.startswith("measured")]
    if timed.empty:
        return f"speed: {QUALITY_ONLY} (no scheme had a low-bit kernel available)"
    engines = [c.removeprefix("ms_per_token") for c in summary.columns if c.startswith("ms_per_token_")
               and not c.endswith("_reps")]

    def on_engine(row: dict, suffix: str) -> str:
        label = f" on {suffix[1:]}" if suffix else ""
        return (f"{row['ms_per_token' + suffix]:.2f} vs fp32 {row['fp32_ms_per_token' + suffix]:.2f} ms/token"
                f"{label} ({row['speedup_vs_fp32' + suffix]:.2f}x)")

    parts = [f"{row['scheme']} " + ", ".join(on_engine(row, suffix) for suffix in ["", *engines])
             for row in timed.to_dict("records")]
    rest = len(summary) - len(timed)
    others = {0: "", 1: f"; the other one is {QUALITY_ONLY}"}.get(rest, f"; the other {rest} are {QUALITY_ONLY}")
    return (f"decode speed measured for {len(timed)} of {len(summary)} schemes with a low-bit kernel "
            f"({'; '.join(parts)}{_eager_calls(timed, engines)}){others}")


def _eager_calls(timed: pd.DataFrame, engines: list[str]) -> str:
    """Once for all schemes, each compiled engine's forwards that ran eagerly inside its timed decodes (on eager
    every forward is one: nothing to say; rows from before the count say nothing)."""
    counted = [f"{int(timed[column].sum())} eager calls in the decodes on {suffix[1:]}" for suffix in engines
               if (column := "eager_calls" + suffix) in timed and timed[column].notna().all()]
    return "; " + ", ".join(counted) if counted else ""


def choose_scheme(summary: pd.DataFrame) -> pd.DataFrame:
    """One row: the chosen scheme by CHOICE_RULE, the numbers behind it and a reason sentence."""
    floor = float(summary["noise_floor"].iloc[0])
    rows = summary.to_dict("records")
    eligible = sorted((r for r in rows if r["within_noise"]), key=choice_key)
    smallest = min(rows, key=lambda r: r["delta_loss"])
    measured = (f"quality (loss, KL to fp32, top-1 agreement) on {int(summary['eval_tokens'].iloc[0]):,} "
                f"validation tokens for all {len(summary)} schemes; " + _speed_sentence(summary))
    base = {"rule": CHOICE_RULE, "noise_floor": floor, "n_schemes": len(rows), "n_below_floor": len(eligible),
            "measured": measured, "smallest_delta_scheme": smallest["scheme"],
            "smallest_delta_loss": smallest["delta_loss"]}
    if not eligible:
        reason = (f"no scheme's loss increase is below the noise floor {floor:.4f}; the smallest is "
                  f"{smallest['scheme']} at {smallest['delta_loss']:+.4f}, so the weights stay fp32")
        return pd.DataFrame([{**base, "scheme": "none", "within_noise": False, "method": "none", "bits": 32,
                              "effective_bits_per_weight": 32.0, "delta_loss": math.nan,
                              "kl_mean_nats": math.nan, "top1_agreement": math.nan,
                              "speed_status": "", "reason": reason}])
    chosen = eligible[0]
    fewer = [r for r in rows if r["bits"] < chosen["bits"]]
    tied = [r["scheme"] for r in eligible[1:] if r["bits"] == chosen["bits"]]
    reason = (f"{chosen['scheme']}: {chosen['bits']}-bit ({chosen['effective_bits_per_weight']:.3f} effective "
              f"bits per weight with scales and zero points), delta loss {chosen['delta_loss']:+.4f} below the "
              f"noise floor {floor:.4f} (KL {chosen['kl_mean_nats']:.4f} nats/token, top-1 agreement "
              f"{chosen['top1_agreement']:.1%})")
    if fewer:
        best_fewer = min(fewer, key=lambda r: r["delta_loss"])
        reason += (f"; none of the {len(fewer)} schemes with fewer bits is below the floor (best: "
                   f"{best_fewer['scheme']} {best_fewer['delta_loss']:+.4f})")
    if tied:
        reason += f"; also below the floor at {chosen['bits']} bits but less simple: {', '.join(tied)}"
    keep = ("scheme", "within_noise", "method", "bits", "effective_bits_per_weight", "delta_loss", "loss",
            "fp32_loss", "kl_mean_nats", "top1_agreement", "speed_status", "ms_per_token", "fp32_ms_per_token",
            "speedup_vs_fp32")
    return pd.DataFrame([{**base, **{k: chosen[k] for k in keep}, "reason": reason}])


def summary_table(rows: list[pd.DataFrame], order: list[str], floor: float) -> pd.DataFrame:
    """The per-scheme rows in config order, each with its verdict against the noise floor."""
    table = pd.concat(rows, ignore_index=True).set_index("scheme").loc[order].reset_index()
    table["noise_floor"] = floor
    table["within_noise"] = [within_noise(delta, floor) for delta in table["delta_loss"]]
    return table
