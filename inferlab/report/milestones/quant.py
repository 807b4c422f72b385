"""M4, what weight quantization costs: each scheme's loss change against the noise floor, and the choice."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferlab.quant.spec import SEED_SCHEMES
from inferlab.report.inputs import ReportInputError, ReportInputs
from inferlab.report.milestones.common import Milestone, Target, checked, missing_milestone
from inferlab.report.stamp_reader import stamps_for
from inferlab.review.numbers import number as _num


@dataclass
class QuantEvidence:
    noise_floor: float
    floor_reliable: bool
    floor_note: str  # why the floor is unreliable (the producer's words)
    schemes: int
    measured: str  # the quantization job's own statement of what it measured
    scheme: str | None = None  # the choice; None: no scheme's loss increase is below the floor
    reason: str = ""  # the choice rule's own sentence (or why nothing was chosen)
    delta_loss: float | None = None
    within_noise: bool = False
    # the scheme table's facts the findings read (sorted by loss increase)
    smallest: tuple[str, float] = ("", 0.0)
    largest: tuple[str, float] = ("", 0.0)
    fewest_bits_within: tuple[str, float, float] | None = None  # scheme, bits, Δ loss
    seed_deltas: dict[str, tuple[float, float]] = field(default_factory=dict)  # scheme -> (ours, theirs)
    seed: dict = field(default_factory=dict)  # the seed page's quantization and noise floor
    targets: list[Target] = field(default_factory=list)


def check_m4(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    stamps = stamps_for(
        data,
        "quant_summary",
        "one pass over the full validation split per scheme",
        "fp32 weights of the same checkpoint",
        machine_fallback,
    )
    absent = missing_milestone(data, "M4", stamps)
    if absent is not None:
        return absent
    summary = data.require("quant_summary")
    nf = data.require("noise_floor")
    choice = data.require("quant_choice")
    if choice.empty:
        raise ReportInputError(f"{data.paths.get('quant_choice', 'quant_choice')} has no row")
    stamps["repeats"] += f"; noise floor from {len(nf)} training runs ({nf['floor_source'].iloc[0]})"
    row = choice.iloc[0]
    reliable = bool(nf["floor_reliable"].iloc[0]) if "floor_reliable" in nf.columns else True
    note = str(nf["floor_reliability_note"].iloc[0]) if "floor_reliability_note" in nf.columns else ""
    seed = data.seed_reference
    ev = QuantEvidence(float(nf["floor"].iloc[0]), reliable, "" if reliable else note or "too few runs",
                       len(summary), str(row["measured"]), reason=str(row["reason"]),
                       seed={**seed.get("quantization", {}), "floor": seed.get("noise_floor", {}).get("floor")})
    table = summary.sort_values("delta_loss", kind="stable")
    ev.smallest = (str(table["scheme"].iloc[0]), float(table["delta_loss"].iloc[0]))
    ev.largest = (str(table["scheme"].iloc[-1]), float(table["delta_loss"].iloc[-1]))
    within = table[table["within_noise"].astype(bool)]
    if len(within) and "bits" in within:
        fewest = within.sort_values("bits", kind="stable").iloc[0]
        ev.fewest_bits_within = (str(fewest["scheme"]), float(fewest["bits"]), float(fewest["delta_loss"]))
    for scheme, key in SEED_SCHEMES.items():
        if scheme in set(table["scheme"]) and ev.seed.get(key) is not None:
            ev.seed_deltas[scheme] = (float(table.set_index("scheme").loc[scheme, "delta_loss"]), ev.seed[key])
    chose = _num(row["delta_loss"]) is not None and str(row["scheme"]) != "none"
    if chose:  # quant_bench.choose_scheme's choice
        ev.scheme, ev.delta_loss, ev.within_noise = str(row["scheme"]), float(row["delta_loss"]), bool(
            row["within_noise"])
    scheme, delta = (ev.scheme, ev.delta_loss) if chose else ev.smallest
    ev.targets = [Target(f"loss increase of {scheme} over fp32 (nats)", delta, ev.noise_floor, ev.within_noise, "+",
                         "noise floor, our reruns"),
                  *[Target(f"loss increase of {s} (nats)", ours, theirs, unit="+", limit_of="seed page")
                    for s, (ours, theirs) in ev.seed_deltas.items()],
                  Target("noise floor (nats)", ev.noise_floor, ev.seed.get("floor"), limit_of="seed page")]
    problems = []
    if not chose:
        problems.append(f"no scheme's loss increase is below the noise floor (smallest: {ev.smallest[0]})")
    elif not ev.within_noise:
        problems.append(f"the chosen scheme {ev.scheme}'s loss increase is not below the noise floor")
    return checked("M4", ev, stamps, problems)
