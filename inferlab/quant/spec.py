"""Experiment 4, weight quantization, as the report and the review read them."""

from __future__ import annotations

from inferlab.spec import NOISE_FLOOR, REP_RANGE, Export, Figure, Metric, Spec, Table, theirs

SEED_DELTA_LOSS = theirs("Δ loss")
# The seed page's schemes (their Δ loss beside ours): our scheme name -> the seed reference's key.
SEED_SCHEMES = {"int4_per_tensor_sym": "int4_per_tensor_sym_delta", "int4_gptq": "int4_gptq_delta"}

SPEC = Spec(
    name="quant",
    tables=(
        Table("quant_summary", "quant_summary", "summary", "Quantization: every scheme",
              reads=("scheme", "delta_loss", "within_noise"), reads_if_present=("bits",)),
        Table("quant_choice", "quant_summary", "choice", "Quantization: the choice rule",
              reads=("scheme", "within_noise", "delta_loss", "reason", "measured")),
    ),
    metrics=(
        Metric("delta_loss", "quant_summary", "delta_loss", "{scheme}", "nats", NOISE_FLOOR, spread="noise_floor",
               higher_is_better=False),
        Metric("kl_mean_nats", "quant_summary", "kl_mean_nats", "{scheme}", "nats/token", higher_is_better=False),
        Metric("top1_agreement", "quant_summary", "top1_agreement", "{scheme}", higher_is_better=True),
        Metric("effective_bits_per_weight", "quant_summary", "effective_bits_per_weight", "{scheme}", "bits",
               higher_is_better=False),
        Metric("speedup_vs_fp32", "quant_summary", "speedup_vs_fp32", "{scheme}", "x", REP_RANGE, timing=True,
               higher_is_better=True, skip_missing=True),
        Metric("chosen_scheme", "quant_choice", "bits", "chosen", "bits", text="{scheme}"),
    ),
    columns={
        "scheme": "scheme", "method": "method", "granularity": "granularity", "bits": "bits",
        "delta_loss": "Δ loss (nats)", "kl_mean_nats": "KL (nats/token)", "top1_agreement": "top-1 agreement",
        "effective_bits_per_weight": "bits/weight (effective)", "speedup_vs_fp32": "speed vs fp32 (×)",
        "speed_status": "speed", "within_noise": "within noise", "fp32_loss": "fp32 loss (nats)",
        "chosen_scheme": "chosen scheme",
    },
    figures={"quant_delta": Figure(
        "Quantization: validation-loss increase per scheme", "4 Quantization",
        caption=("Validation-loss increase over fp32 per quantization scheme, green within our noise floor, red above "
                 "it; the grey band is ± our noise floor, the dashed line the seed page's floor (their reruns), "
                 "diamonds the seed page's own Δ for the schemes it published."),
        draw="inferlab.report.figures:quant_delta")},
    exports=(Export("precomputed", "quantization", {"summary": "quant_summary", "choice": "quant_choice"}),),
    milestone="M4",
    milestone_title="Quantization: a bit width and method with loss increase below the noise floor",
    required=("quant_summary", "noise_floor", "quant_choice"),
    reviewed=("quant", "models"),
    overlay=("delta_loss", "Quantization: Δ validation loss, ± noise floor"),
    body=("scheme", "bits", "delta_loss", SEED_DELTA_LOSS, "kl_mean_nats", "top1_agreement", "within_noise"),
    body_needs=("quant_summary",),
)
