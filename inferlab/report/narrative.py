"""The one renderer of the milestones: their evidence records become the headline (one sentence, the
key numbers beside the seed page's), the verdict (that headline and its closing), the targets table under
the verdict, the producers' own statements and each experiment's three findings, which say why the numbers
are what they are. Each fact is written once: the verdict does not restate the findings. Every number
goes through review.numbers.fmt and comes from the record; the HTML and the Markdown twin both render
what this module writes.
"""

from __future__ import annotations

from dataclasses import is_dataclass

import pandas as pd

from inferlab.review.numbers import fmt

MET = {True: "met", False: "not met", None: "–"}
VERDICT_CHARS = 500  # a verdict is read in one breath; the targets table and the caveats under it say the rest
LIMIT = "limit (roofline, or the seed page)"


def _sentence(*parts: str) -> str:
    text = "; ".join(p for p in parts if p)
    return text[0].upper() + text[1:] + "." if text else ""


def _span(value, unit: str = "") -> str:
    """A number, a (low, high) range or a text, as a table cell."""
    if isinstance(value, tuple):
        low, high = value
        return fmt(high, unit) if fmt(low) == fmt(high) else f"{fmt(low)}–{fmt(high, unit)}"
    return fmt(value, unit) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


# ------------------------------------------------------------------------------------- M1


def _m1_headline(ev) -> str:
    ratios = ", ".join(f"{fmt(e.ratio, 'x')} on {e.label}" for e in ev.engines.values())
    return (f"KV cache faster at {ev.length} tokens: {ratios} (seed page: {fmt(ev.seed_ratio, 'x')} on their CPU at "
            f"{ev.milestone_length})" + ("; timings contended" if ev.timing.contended else "") + ".")


def _m1_findings(ev) -> list[str]:
    p = ev.primary
    others = "".join(f" and {fmt(e.ratio, '×')} on {e.label}" for e in list(ev.engines.values())[1:])
    flop = f", against the {fmt(p.flop_estimate_ratio, '×')} the FLOP count predicts" if p.flop_estimate_ratio else ""
    longest = (f" (the longest length here, not the seed's {ev.milestone_length})"
               if ev.length < ev.milestone_length else "")
    shortest = min(p.ratio_by_length)
    low, high = p.ratio_by_length[shortest], p.ratio
    trend = "rises" if high > 1.1 * low else "falls" if high < low / 1.1 else "stays about flat"
    found = [f"At {ev.length} generated tokens{longest} the cache is {fmt(p.ratio, '×')} faster than recomputing on "
             f"{p.label}{others}{flop}.",
             f"On {p.label} the ratio {trend} with length: {fmt(low, '×')} at {shortest} tokens, "
             f"{fmt(high, '×')} at {ev.length}."]
    if p.predicted_ratio is not None:
        lead = ("A fixed per-step cost explains the gap to the FLOP count" if ev.fit_explains
                else "The step-time fit does not explain the gap either")
        seed = (f"; the seed page's CPU measured {fmt(ev.seed_ratio, '×')} (their model, their machine)"
                if ev.seed_ratio is not None and ev.length == ev.milestone_length else "")
        found.append(f"{lead}: the fit a + b·positions of the step time predicts {fmt(p.predicted_ratio, '×')} at "
                     f"{ev.length} on {p.label}{seed}.")
    return found


# ------------------------------------------------------------------------------------- M2


def _m2_headline(ev) -> str:
    seed = ev.seed_cell
    theirs = f"(seed page: T={seed.get('temperature')} top-p {seed.get('top_p')}, {seed.get('kept')} kept, their model)"
    if ev.chosen is None:
        return f"No default sampling setting chosen {theirs}."
    if ev.rule_kind == "human_match" and ev.distance is not None:
        ci = f" (CI {_span(ev.distance_ci)})" if ev.distance_ci else ""
        number = f"distance to human text {fmt(ev.distance)}{ci}" + (
            f" vs greedy {fmt(ev.greedy_distance)}" if ev.greedy_distance is not None else "")
    else:
        number = f"seq-rep-4 {fmt(ev.seq_rep_4)}"
    min_p = f"; min-p: {ev.min_p_decision}" if ev.min_p_decision else ""
    return f"Default {ev.chosen}: {number}, {fmt(ev.kept, ' tokens kept')}{min_p} {theirs}."


def _m2_findings(ev) -> list[str]:
    found = []
    if ev.distance is not None and ev.chosen is not None:
        rank = ("the cell closest to human text" if ev.closest
                else "the rule's pick among cells tied with the closest within noise")
        versus = (f", against {fmt(ev.runner_up_distance)} for the next closest, {ev.runner_up}"
                  if ev.runner_up else "")
        greedy = f", and {fmt(ev.greedy_distance)} for greedy" if ev.greedy_distance is not None else ""
        found.append(f"The default {ev.chosen} is {rank}: distance {fmt(ev.distance)}{versus}{greedy}.")
    elif ev.chosen is not None:
        found.append(f"Default {ev.chosen} by the in-corpus floor rule: seq-rep-4 {fmt(ev.seq_rep_4)}, in-corpus "
                     f"4-gram share {fmt(ev.in_corpus_share)} against the floor {fmt(ev.in_corpus_floor)}.")
    if None not in (ev.greedy_seq_rep_4, ev.human_seq_rep_4, ev.least_repetitive):
        drifts = ev.least_in_corpus < ev.human_in_corpus
        lead = "Less repetition is not better text" if drifts else "Less repetition here stays close to the corpus"
        found.append(f"{lead}: greedy repeats {fmt(ev.greedy_seq_rep_4)} of its 4-grams and human text "
                     f"{fmt(ev.human_seq_rep_4)}; the least repetitive cell, {ev.least_repetitive}, repeats "
                     f"{fmt(ev.least_seq_rep_4)}, {'but only' if drifts else 'and'} {fmt(ev.least_in_corpus)} of its "
                     f"4-grams occur in the corpus (human text: {fmt(ev.human_in_corpus)}).")
    if ev.ours_at_seed_cell is not None:
        found.append(f"At the seed page's cell {ev.ours_at_seed_cell} our model keeps {fmt(ev.ours_at_seed_kept)} "
                     f"tokens after the prompt (entropy {fmt(ev.ours_at_seed_entropy)} nats); theirs kept "
                     f"{ev.seed_cell.get('kept')}.")
    elif ev.kept is not None:
        found.append(f"The default keeps {fmt(ev.kept)} tokens after the prompt (entropy {fmt(ev.entropy_nats)} nats).")
    return found


# ------------------------------------------------------------------------------------- M3


def _m3_headline(ev) -> str:
    walls = ", ".join(f"{name} {fmt(e.fastest_wall_speedup, 'x')} ({e.fastest_group})"
                      for name, e in ev.engines.items())
    theirs = ev.seed.get("best_by_params", {})
    return (f"Speculative: chosen {ev.draft} k={ev.k} on {ev.engine} (theory {fmt(ev.speedup_time, 'x')}, wall clock "
            f"{fmt(ev.wall_speedup, 'x')}); fastest on the wall clock {walls}; greedy identical {ev.greedy_identical}/"
            f"{ev.greedy_cases} (seed page: {theirs.get('draft')} k={theirs.get('k')} by parameters, wall clock "
            f"{ev.seed.get('wall_clock')})" + ("; timings contended" if ev.timing.contended else "") + ".")


def _m3_findings(ev) -> list[str]:
    verb = "predicts" if ev.formula_close else "misses"
    walls = " and ".join(f"{fmt(w, '×')} on {e}" for e, w in ev.walls_of_fastest.items())
    last = list(ev.walls_of_fastest)[-1]
    same = ("it is also the best group by parameter cost." if ev.fastest_of_last == ev.params_best_group else
            "it is not the best group by parameter cost: a draft's forward does not cost in proportion to its "
            "parameters here.")
    return [f"The formula with the measured α {verb} the yield: the largest gap is at {ev.worst_yield_group}, "
            f"{fmt(ev.worst_yield)} tokens per target forward measured against {fmt(ev.worst_formula)} from the "
            "formula.",
            f"By parameter cost the best group is {ev.params_best_group}: theory speedup "
            f"{fmt(ev.params_best_speedup, '×')}, at acceptance α = {fmt(ev.params_best_alpha)}.",
            f"On the wall clock the fastest group on {last} is {ev.fastest_of_last}: {walls}, as a ratio to "
            f"target-only sampling timed interleaved with it; {same}"
            + "".join(f" On {name} no group beats target-only sampling." for name, e in ev.engines.items()
                      if e.fastest_wall_speedup < 1)]


# ------------------------------------------------------------------------------------- M4


def _m4_headline(ev) -> str:
    theirs = (f"(seed page: INT4 GPTQ {fmt(ev.seed.get('int4_gptq_delta'), '+')}, INT4 per-tensor "
              f"{fmt(ev.seed.get('int4_per_tensor_sym_delta'), '+')} against their floor {fmt(ev.seed.get('floor'))})")
    ours = f"noise floor {fmt(ev.noise_floor)}" + ("" if ev.floor_reliable else ", unreliable")
    if ev.scheme is not None:
        return f"Quantization: {ev.scheme} loses {fmt(ev.delta_loss, '+')} in validation loss, {ours} {theirs}."
    return (f"Quantization: no scheme within the {ours}; smallest increase {ev.smallest[0]} "
            f"{fmt(ev.smallest[1], '+')} {theirs}.")


def _m4_findings(ev) -> list[str]:
    found = [f"The smallest loss increase is {ev.smallest[0]} at {fmt(ev.smallest[1])} nats, the largest "
             f"{ev.largest[0]} at {fmt(ev.largest[1])} nats."]
    floor = f" ({fmt(ev.noise_floor)} nats, from our reruns)"
    if ev.fewest_bits_within:
        scheme, bits, delta = ev.fewest_bits_within
        chose = f"the rule chose {ev.scheme}." if ev.scheme else "no choice was made."
        found.append(f"The fewest bits within the noise floor{floor}: {scheme} at {fmt(bits)} bits, Δ loss "
                     f"{fmt(delta)} nats; {chose}")
    else:
        found.append(f"No scheme stays within the noise floor{floor}: the weights stay fp32.")
    if ev.seed_deltas:
        found.append("Beside the seed page: " + "; ".join(f"{s} {fmt(ours)} nats here, {fmt(theirs)} theirs"
                                                         for s, (ours, theirs) in ev.seed_deltas.items()) + ".")
    return found


# ------------------------------------------------------------------------------------- shared

# milestone -> (its headline, also the verdict's first sentence; its findings)
_RENDER = {"M1": (_m1_headline, _m1_findings), "M2": (_m2_headline, _m2_findings),
           "M3": (_m3_headline, _m3_findings), "M4": (_m4_headline, _m4_findings)}


def _judged(m) -> bool:
    return is_dataclass(m.evidence) and m.id in _RENDER


def _eager_calls(m) -> tuple[str, bool] | None:
    """The count of forwards that ran eagerly in the milestone's compiled rows, and whether it is a caveat (some
    did); None where its tables do not count them (no compiled rows, or tables from before the count)."""
    counted = getattr(getattr(m.evidence, "timing", None), "eager_calls", None)
    if counted is None:
        return None
    later = f"; {fmt(counted.uncounted)} compiled rows predate the count" if counted.uncounted else ""
    if counted.calls == 0:
        text = f"compiled rows: 0 eager calls in {fmt(counted.rows)} rows (every forward ran as a package)"
    else:
        text = (f"compiled rows: {fmt(counted.calls)} eager calls in {fmt(counted.rows_with)} of {fmt(counted.rows)} "
                "rows (their forwards ran op by op, outside any compiled package, inside the timed work)")
    return text + later, counted.calls > 0


def caveats(m) -> list[str]:
    """What the verdict's numbers must be read with; the experiment's section lists them under its verdict."""
    ev, out = m.evidence, []
    if m.stale:
        out += [f"{key} is stale ({why}); the checks said {m.stale.checked}" for key, why in m.stale.reasons.items()]
    if not _judged(m):
        return out
    caveat = getattr(ev, "timing", None)
    if caveat is not None and caveat.contended:
        out.append("timings contended: other work loaded the machine, so they do not compare with an idle run")
    if caveat is not None and caveat.partly_contended:
        out.append(f"timings contended in {caveat.partly_contended}: their jobs ran beside other work, so those rows "
                   "do not compare with an idle run; the other rows' jobs had the machine to themselves")
    if caveat is not None and len(caveat.nodes) > 1:
        out.append(f"not comparable (different nodes): the timings ran on {', '.join(caveat.nodes)}")
    eager = _eager_calls(m)
    if eager is not None and eager[1]:
        out.append(eager[0])
    if m.id == "M2" and ev.chosen is not None and not ev.rule_satisfied:
        out.append("finding: no cell met the rule's threshold (the in-corpus share floor), so the default is the "
                   "rule's fallback, the cell with the highest in-corpus share")
    if m.id == "M3":
        out += [f"the {name} group jobs ran at different machine speeds (their own target step "
                f"{_span(e.target_step_ms, ' ms')}), so their milliseconds do not compare"
                for name, e in ev.engines.items() if e.job_speeds_differ]
    if m.id == "M4" and not ev.floor_reliable:
        out.append(f"the noise floor is unreliable ({ev.floor_note}), so read 'below the floor' with care")
    return out


def notes(m) -> list[str]:
    """What was counted and found clean, said under the caveats so a reader sees it was checked: here, no
    forward of the compiled rows ran eagerly."""
    eager = _eager_calls(m) if _judged(m) else None
    return [eager[0]] if eager is not None and not eager[1] else []


def _closing(m) -> str:
    """The verdict's last sentence: why it failed, else the first target below that is not met, the rest
    counted, and whether caveats follow."""
    unmet = [t.target for t in m.evidence.targets if t.met is False]
    if m.problems:
        text = _sentence(f"failed: {'; '.join(m.problems)}")
    elif unmet:
        text = _sentence(f"not met below: {unmet[0]}" + (f" and {len(unmet) - 1} more" if len(unmet) > 1 else ""))
    else:
        text = "Every target below is met."
    return text + (" Read it with the caveats below." if caveats(m) else "")


def verdict(m) -> str:
    """In one breath: the headline (what was found, beside the seed page) and the closing; a stale milestone
    says so first. The targets table, the caveats and the findings say the rest."""
    if _judged(m):
        text = f"{_RENDER[m.id][0](m.evidence)} {_closing(m)}"
    else:
        text = f"Missing inputs: {', '.join(m.missing_inputs)}." if m.missing_inputs else ""
    if m.stale:
        text = f"STALE: rebuild {', '.join(m.stale.inputs)} (the checks said {m.stale.checked}). {text}"
    return text


def headline(m) -> str:
    if not _judged(m):
        return verdict(m)
    text = _RENDER[m.id][0](m.evidence)
    return f"STALE (rebuild {', '.join(m.stale.inputs)}): {text}" if m.stale else text


def findings(m) -> list[str]:
    """The experiment's three things to read from its table, from the same evidence."""
    return _RENDER[m.id][1](m.evidence) if _judged(m) else []


def targets_table(m) -> pd.DataFrame | None:
    """One row a target: what was checked, ours, the limit it is held to, and whether it is met."""
    targets = getattr(m.evidence, "targets", None) if _judged(m) else None
    if not targets:
        return None

    def limit(t) -> str:
        unit = t.unit.strip("+")  # a limit is a level, not a change
        parts = [_span(t.limit, unit) + (f" ({t.limit_of})" if t.limit_of else "")] if t.limit is not None else []
        parts += [f"roofline {_span(t.roofline, t.unit)}"] if t.roofline is not None else []
        return "; ".join(parts) or "–"

    return pd.DataFrame([{"target": t.target, "ours": _span(t.ours, t.unit), LIMIT: limit(t), "met?": MET[t.met]}
                         for t in targets])


def statements(m) -> list[str]:
    """The producers' own sentences the decision rests on, quoted under the targets (never re-worded)."""
    if not _judged(m):
        return []
    ev = m.evidence
    if m.id == "M2":
        return [f"The rule, as the sampling job states it: {ev.rule}",
                *([f"Min-p: {ev.min_p_decision} ({ev.min_p_reason})"] if ev.min_p_decision else [])]
    if m.id == "M3":
        return [f"Why {ev.draft} k={ev.k}, as the speculative job states it: {ev.reason}.",
                "Each group's round accounting (draft steps, verification, prefill, the rest), each step against "
                "its bound and its compile time are in the appendix."]
    if m.id == "M4":
        return [f"The choice rule: {ev.reason}.", f"Measured: {ev.measured}."]
    return []


def verdict_blocks(m) -> list[tuple]:
    """The verdict, its targets table, its caveats and the producers' statements, as report blocks."""
    blocks = [("h3", "Verdict"), ("milestone", m)]
    table = targets_table(m)
    if table is not None:
        blocks.append(("table", table, f"What {m.id} checked: ours against each limit"))
    blocks += [("note", f"Caveat: {text}.") for text in caveats(m)]
    blocks += [("note", f"Note: {text}.") for text in notes(m)]
    said = statements(m)
    return blocks + ([("details", "The rules, as the jobs state them", [("note", text) for text in said])]
                     if said else [])
