"""Experiment 4 as jobs: one scheme's quality (and speed where a kernel exists), the summary, the choice.

A scheme job quantises the target, evaluates fp32 and quantised weights on the full validation
split in the same process with the same code (evaluate_loss), and, where the scheme's integer
layout has a low-bit kernel available on the device, times cached greedy decode of the kernel
model against the fp32 model, interleaved rep by rep.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import TextIO

import pandas as pd
import torch
from torch import nn

from inferlab.core.engine import Engine, make_engine
from inferlab.core.evaluation import evaluate_against_reference
from inferlab.core.generate import generate
from inferlab.core.timing import timed_ms
from inferlab.quant import kernels as quant_kernels
from inferlab.quant import methods as quant
from inferlab.quant.gptq import calibration_windows
from inferlab.training.noise_floor import within_noise

BASELINE = "fp32 weights of the same checkpoint, evaluated in the same job with the same code"
QUALITY_ONLY = "quality only"
GPTQ_KEYS = ("calibration_windows", "damp", "block_size", "seed")  # config quantization.gptq


def speed_status(scheme: quant.Scheme, device: str) -> tuple[str, bool]:
    """What the speed columns mean for this scheme, and whether a measurement is made."""
    if scheme.kernel is None:
        return f"{QUALITY_ONLY}: no low-bit matmul kernel for this layout", False
    kernel = quant_kernels.KERNELS[scheme.kernel]
    if not kernel.available(device):
        return f"{QUALITY_ONLY}: kernel {kernel.name} not available on {device}", False
    return f"measured: {kernel.description}", True


def run_scheme(reference: nn.Module, scheme_name: str, val_ids: torch.Tensor, train_ids: torch.Tensor,
               seq_len: int, floor: float, prompt: torch.Tensor, new_tokens: int, reps: int,
               gptq: dict | None = None, device: str = "cpu", batch_size: int = 16,
               progress_file: TextIO | None = None, engines: tuple[str, ...] = ("eager",)) -> dict:
    """One row: quality against fp32, storage, verdict against the noise floor, and speed if measurable.

    gptq: config's quantization.gptq {calibration_windows, damp, block_size, seed}; required by
    methods that calibrate, which take no defaults of their own.
    engines: the decode engines the speed is timed on; eager's columns have no suffix, every other
    engine's columns end in _<engine> (fp32 and kernel model always on the same engine).
    """
    scheme = quant.get_scheme(scheme_name)
    layers = quant.quantized_linears(reference)
    shapes = [tuple(linear.weight.shape) for _, linear in layers]
    quantised_params = sum(n * k for n, k in shapes)
    options: dict = {}
    n_calibration = 0
    if scheme.method == "gptq":
        absent = [key for key in GPTQ_KEYS if key not in (gptq or {})]
        if absent:
            raise ValueError(f"{scheme_name}: GPTQ settings {absent} missing (config quantization.gptq)")
        n_calibration = int(gptq["calibration_windows"])
        options = {"calibration": calibration_windows(train_ids, n_calibration, seq_len, int(gptq["seed"])),
                   "damp": float(gptq["damp"]), "block_size": int(gptq["block_size"]),
                   "progress_file": progress_file}
    start = time.perf_counter()
    quantised, result = quant.quantize_model(reference, scheme_name, **options)
    quantize_s = time.perf_counter() - start

    quality = evaluate_against_reference(reference, quantised, val_ids, seq_len, batch_size,
                                               progress_file=progress_file)
    status, measurable = speed_status(scheme, device)
    speed = {f"{column}{engine_suffix(name)}": math.nan for name in engines for column in SPEED_COLUMNS}
    speed |= {f"engine_used{engine_suffix(name)}": "" for name in engines}
    speed["kernel_max_rel_err"] = math.nan
    if measurable:
        fast = quant_kernels.kernel_model(quantised, result, scheme_name)
        for name in engines:
            engine = make_engine(name)
            measured = measure_decode_speed(reference, fast, prompt, new_tokens, reps, engine)
            speed |= {f"{column}{engine_suffix(name)}": measured[column] for column in SPEED_COLUMNS}
            speed[f"engine_used{engine_suffix(name)}"] = engine.engine_used
        speed["kernel_max_rel_err"] = quant_kernels.kernel_max_rel_error(quantised, fast)
    delta = quality["delta_loss"]
    return {
        "scheme": scheme.name, "method": scheme.method, "bits": scheme.bits,
        "granularity": scheme.granularity, "group_size": scheme.group_size or 0,
        "symmetric": scheme.symmetric,
        "quantized_layers": len(layers), "quantized_params": quantised_params,
        "fp32_params": sum(p.numel() for p in reference.parameters()) - quantised_params,
        "embedding": quant.EMBEDDING_NOTE,
        "effective_bits_per_weight": quant.effective_bits_per_weight(scheme, shapes),
        "scale_storage": "none" if scheme.granularity == "none" else f"{quant.SCALE_BITS}-bit float",
        "zero_storage": "none" if scheme.symmetric else f"{scheme.bits}-bit integer",
        "seq_len": seq_len, "eval_tokens": quality["eval_tokens"],
        "loss": quality["loss"], "fp32_loss": quality["fp32_loss"], "delta_loss": delta,
        "kl_mean_nats": quality["kl_mean_nats"], "top1_agreement": quality["top1_agreement"],
        "noise_floor": floor, "within_noise": within_noise(delta, floor),
        "calibration_windows": n_calibration, "quantize_s": quantize_s,
        "kernel": scheme.kernel or "none", "speed_status": status,
        "speed_reps": reps if measurable else 0, "speed_new_tokens": new_tokens if measurable else 0,
        **speed,
    }


SPEED_COLUMNS = ("fp32_ms_per_token", "ms_per_token", "speedup_vs_fp32", "greedy_agreement_vs_fp32")


def engine_suffix(engine_name: str) -> str:
    """Column suffix of an engine's speed figures: none for the eager baseline engine."""
    return "" if engine_name == "eager" else f"_{engine_name}"


def time_decode(model: nn.Module, prompt: torch.Tensor, new_tokens: int,
                engine: Engine | None = None) -> tuple[float, torch.Tensor]:
    """Wall ms per generated token of one cached greedy generate() call, and its tokens."""
    out, elapsed_ms = timed_ms(lambda: generate(model, prompt, new_tokens, use_cache=True, engine=engine))
    return elapsed_ms / new_tokens, out.tokens


def measure_decode_speed(reference: nn.Module, fast: nn.Module, prompt: torch.Tensor,
                         new_tokens: int, reps: int, engine: Engine | None = None) -> dict:
    """Median ms/token of fp32 and kernel decode on one engine, interleaved rep by rep so drift
    hits both alike. The warm-up call also compiles each model's graph on a compiled engine."""
    for model in (reference, fast):  # warm-up: first-call allocation, kernel dispatch, compilation
        time_decode(model, prompt, new_tokens, engine)
    ref_ms, fast_ms = [], []
    for _ in range(reps):
        ms, ref_tokens = time_decode(reference, prompt, new_tokens, engine)
        ref_ms.append(ms)
        ms, fast_tokens = time_decode(fast, prompt, new_tokens, engine)
        fast_ms.append(ms)
    fp32_median, fast_median = statistics.median(ref_ms), statistics.median(fast_ms)
    new_ref, new_fast = ref_tokens[:, prompt.size(1):], fast_tokens[:, prompt.size(1):]
    return {"fp32_ms_per_token": fp32_median, "ms_per_token": fast_median,
            "speedup_vs_fp32": fp32_median / fast_median,
            "fp32_ms_per_token_reps": ref_ms, "ms_per_token_reps": fast_ms,
            "greedy_agreement_vs_fp32": float((new_ref == new_fast).float().mean())}


# ------------------------------------------------------------------------------------------ choice


def choice_key(row: dict) -> tuple:
    """Sort key of the rule: nominal bits, then the simpler method, then fewer effective bits."""
    return (row["bits"], quant.get_scheme(row["scheme"]).simplicity, row["effective_bits_per_weight"],
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
    return (f"decode speed measured for {len(timed)} of {len(summary)} schemes with a low-bit kernel "
            f"({'; '.join(parts)}); the other {len(summary) - len(timed)} are {QUALITY_ONLY}")


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


def summary_table(rows: list[pd.DataFrame], order: list[str]) -> pd.DataFrame:
    """The per-scheme rows in config order."""
    table = pd.concat(rows, ignore_index=True)
    return table.set_index("scheme").loc[order].reset_index()
