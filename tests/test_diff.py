"""The metrics table and the noise-aware diff, on tables made by the real producers from tiny inputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inferlab.core import sampler as sampling
from inferlab.jobs.row_contention import contended_rows
from inferlab.kvcache import summary as kvsummary
from inferlab.quant import choice as quant_choice
from inferlab.report import changes
from inferlab.report.changes import changes_markdown
from inferlab.review import diff, diff_summary, verdicts
from inferlab.review.diff_figure import diff_figure
from inferlab.review.metrics import BOOTSTRAP_CI, EXACT, NOISE_FLOOR, REP_RANGE, metrics_table
from inferlab.sampling import aggregate as sampling_aggregate
from inferlab.sampling import threshold_rule
from inferlab.sampling.summary_table import CELL_COLUMNS
from inferlab.speculative import summary as speculative_summary
from inferlab.training import noise_floor as noise

MACHINE_A = {"cpu_model": "CPU A", "device": "cpu", "device_name": "CPU A"}
MACHINE_B = {"cpu_model": "CPU B", "device": "cpu", "device_name": "CPU B"}
FLOOR = 0.02
# scheme -> (bits, delta_loss, KL); int4_per_channel_sym is below the floor with the fewest bits: chosen.
SCHEMES = {"int8_per_channel_sym": (8, 0.001, 0.002), "int4_per_channel_sym": (4, 0.010, 0.03),
           "int4_g32_sym": (4, 0.008, 0.02), "int3_per_tensor_sym": (3, 0.300, 0.4)}


def kv_timings(seed: int, reps: int = 5) -> pd.DataFrame:
    """Five back-to-back rep pairs per length; the spread is a few percent, as on a quiet machine."""
    rng = np.random.default_rng(seed)
    rows = []
    for length in (16, 64):
        for rep in range(reps):
            for mode, base in (("cache", 1.0 * length), ("no_cache", 0.05 * length ** 2)):
                total = base * (1 + 0.03 * rng.standard_normal())
                rows.append({"rep": rep, "mode": mode, "total_ms": total, "ms_per_token": total / length,
                             "length": length, "same_output": True, "kv_bytes_per_token": 512,
                             "device": "cpu", "threads": 2, "prompt_tokens": 8})
    return pd.DataFrame(rows)


def repetition_samples() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    cells = {"greedy": ("none", 0.0, 0.0), "t1_p09": ("top_p", 1.0, 0.0), "t1_m005": ("min_p", 1.0, 0.05)}
    rows = []
    for cell, (truncation, temperature, min_p) in cells.items():
        for sample in range(8):
            rows.append({"cell": cell, "truncation": truncation, "temperature": temperature,
                         "top_p": 0.9 if truncation == "top_p" else 1.0, "min_p": min_p, "prompt": f"p{sample % 2}",
                         "sample": sample // 2, "seq_rep_4": float(rng.uniform(0.1, 0.5)),
                         "distinct_1": float(rng.uniform(0.4, 0.6)), "distinct_2": float(rng.uniform(0.6, 0.8)),
                         "in_corpus_4gram_share": float(rng.uniform(0.5, 0.6)),
                         "nll_per_token": float(rng.uniform(3.0, 4.0)),
                         "zipf_coefficient": float(rng.uniform(0.3, 0.5)),
                         "text": "x"})
    return pd.DataFrame(rows)


def speculative_tables(seed: int, reps: int = 5) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    runs, forward = [], []
    for draft, k, accepted in (("small", 2, 10), ("small", 4, 14)):
        for rep in range(reps):
            runs.append({"draft": draft, "k": k, "prompt_index": 0, "seed": 1, "rep": rep, "new_tokens": 20,
                         "rounds": 8, "target_forwards": 8, "draft_forwards": 8 * k, "drafted": 8 * k,
                         "proposed": 8 * k - 2, "accepted": accepted, "generated": 20, "overlap_sum": accepted * 0.9,
                         "wall_ms": 50 * (1 + 0.02 * rng.standard_normal()), "prefill_ms": 5.0,
                         "new_token_ids": [1, 2, 3]})
            for role, tokens, ms in (("target", 1, 2.0), ("draft", 1, 0.5), ("target", k + 1, 2.5)):
                forward.append({"draft": draft, "k": k, "role": role, "tokens_per_forward": tokens,
                                "rep": rep, "forward_ms": ms * (1 + 0.02 * rng.standard_normal())})
    baseline = pd.DataFrame([{"draft": draft, "k": k, "rep": rep, "wall_ms": 80 * (1 + 0.02 * rng.standard_normal()),
                              "prefill_ms": 3.0}
                             for draft, k in (("small", 2), ("small", 4)) for rep in range(reps)])
    return pd.DataFrame(runs), pd.DataFrame(forward), baseline


def quant_summary(changes: dict[str, float] | None = None) -> pd.DataFrame:
    """Rows shaped as quant_bench.run_scheme returns them, through the real summary and choice."""
    rows = []
    for name, (bits, delta, kl) in SCHEMES.items():
        delta = (changes or {}).get(name, delta)
        rows.append(pd.DataFrame([{"scheme": name, "method": "rtn", "bits": bits,
                                   "effective_bits_per_weight": bits + 0.01,
                                   "eval_tokens": 1000, "loss": 4.0 + delta, "fp32_loss": 4.0, "delta_loss": delta,
                                   "kl_mean_nats": kl, "top1_agreement": 1 - kl,
                                   "speed_status": "quality only", "ms_per_token": np.nan,
                                   "fp32_ms_per_token": np.nan, "speedup_vs_fp32": np.nan}]))
    return quant_choice.summary_table(rows, list(SCHEMES), FLOOR)


def run_metrics(timing_seed: int = 0, machine: dict = MACHINE_A, quant_changes: dict | None = None,
                statuses: dict[str, str] | None = None, contended: bool = False, reps: int = 5,
                contended_groups: tuple = ()) -> pd.DataFrame:
    samples = repetition_samples()
    rep_summary = sampling_aggregate.summarise(samples, 200, 0)
    cells = samples.drop_duplicates("cell")[CELL_COLUMNS].to_dict("records")
    distribution = pd.DataFrame(sampling.distribution_rows([2.0, 1.0, 0.5, 0.1, -1.0],
                                                           [c for c in cells if c["temperature"] > 0]))
    runs, forward, baseline = speculative_tables(timing_seed, reps)
    spec = speculative_summary.summarise(runs, forward, baseline, {"small": 1000, "target": 10000}, "target")
    # each run's bounds come from its own probe: the steps' from its bandwidth, the verifications' from its FLOP/s
    bandwidth, flops = np.random.default_rng(timing_seed + 1000).uniform(0.9, 1.1, 2)
    spec = speculative_summary.with_step_bounds(spec, {"target": 0.5 / bandwidth, "small": 0.05 / bandwidth},
                                                "target", {2: 0.6 / flops, 4: 0.8 / flops})
    # as speculative_group.py flags each job's rows, and speculative_summary.py carries them per group
    runs["contended"] = [contended or (d, k) in contended_groups
                         for d, k in zip(runs["draft"], runs["k"], strict=True)]
    spec["contended"] = contended_rows(spec, runs, ["draft", "k"])
    quant = quant_summary(quant_changes)
    timings = kv_timings(timing_seed, reps)
    floor = noise.noise_floor_table([{"name": "seed_a", "seed": 1, "val_loss": 4.00},
                                     {"name": "seed_b", "seed": 2, "val_loss": 4.01}], 2.0, "fixed", FLOOR)
    tables = {"kv_summary": kvsummary.summarize_timings(timings), "sp_distribution": distribution,
              "sp_repetition": rep_summary,
              "sp_default": pd.DataFrame([threshold_rule.choose_default(rep_summary, distribution, 0.5)]),
              "spec_summary": spec, "spec_best": speculative_summary.best_groups(spec),
              "quant_summary": quant, "quant_choice": quant_choice.choose_scheme(quant), "noise_floor": floor,
              "kv_fit": None}
    statuses = {"M1": "pass", "M2": "pass", "M3": "pass", "M4": "pass", **(statuses or {})}
    milestones = pd.DataFrame([{"milestone": m, "status": s} for m, s in statuses.items()])
    stamps = {"model": "ref_baseline", "repeats": "5", "baseline": "fp32", "machine": machine,
              "contended": contended}
    return metrics_table(tables, milestones, stamps, metas={"ref_baseline": {"val_loss": 3.9}})


def changed(d: pd.DataFrame) -> pd.DataFrame:
    return d[d["verdict"].isin([verdicts.CHANGED, verdicts.FLIPPED])]


# ------------------------------------------------------------------------------------ metrics table


def test_metrics_table_covers_every_experiment_with_its_noise_kind():
    table = run_metrics()
    kinds = table.groupby(["experiment", "metric"])["noise_kind"].first()
    assert kinds["kvcache", "speed_ratio"] == REP_RANGE
    assert kinds["quant", "delta_loss"] == NOISE_FLOOR
    assert kinds["sampling", "seq_rep_4"] == BOOTSTRAP_CI
    assert kinds["speculative", "alpha"] == EXACT
    assert kinds["models", "val_loss"] == NOISE_FLOOR
    ratio = table[(table.metric == "speed_ratio") & (table.key == "64")].iloc[0]
    assert ratio.low <= ratio.value <= ratio.high and ratio.low < ratio.high
    delta = table[(table.metric == "delta_loss") & (table.key == "int3_per_tensor_sym")].iloc[0]
    assert delta.high - delta.low == pytest.approx(2 * FLOOR)
    assert table.loc[table.metric == "chosen_scheme", "text_value"].tolist() == ["int4_per_channel_sym"]
    assert set(table.loc[table.experiment == "milestones", "key"]) == {"M1", "M2", "M3", "M4"}
    assert (table["machine_cpu_model"] == "CPU A").all() and (table["model"] == "ref_baseline").all()


def test_each_metric_row_records_its_engine_beside_its_key():
    spec = speculative_summary.summarise(*speculative_tables(0), {"small": 1000, "target": 10000}, "target")
    table = metrics_table({"spec_summary": spec.assign(engine="compiled"), "quant_summary": quant_summary()}, None,
                          {"model": "ref_baseline", "machine": MACHINE_A})
    rows = table[table.experiment == "speculative"]
    assert len(rows) and (rows["engine"] == "compiled").all()
    assert (rows["key"] == rows["base_key"] + " [compiled]").all()
    quant = table[table.experiment == "quant"]
    assert quant["engine"].isna().all() and (quant["key"] == quant["base_key"]).all()


def test_the_uncached_fit_enters_the_metrics_once_per_engine_and_its_ratio_once_per_length():
    """fit_table repeats an engine's fit (a, b) on every length's row; the metrics hold it once."""
    fit = pd.DataFrame([{"engine": engine, "length": length, "a_ms": a, "b_ms_per_position": 0.04,
                         "predicted_ratio": length / 10} for engine, a in (("eager", 2.8), ("compiled", 1.9))
                        for length in (64, 256)])
    table = metrics_table({"kv_fit": fit}, None, {})
    keys = table.groupby("metric")["key"].apply(sorted).to_dict()
    assert keys["fit_a_ms"] == keys["fit_b_ms_per_position"] == ["uncached step [compiled]", "uncached step [eager]"]
    assert keys["predicted_ratio"] == ["256 [compiled]", "256 [eager]", "64 [compiled]", "64 [eager]"]
    assert table.set_index("key").loc["uncached step [compiled]"].query("metric == 'fit_a_ms'")["value"].item() == 1.9


def test_absent_tables_are_skipped_and_extra_columns_flow_through():
    only_quant = metrics_table({"quant_summary": quant_summary()}, None, {})
    assert set(only_quant["experiment"]) == {"quant"}
    samples = repetition_samples()
    summary = sampling_aggregate.summarise(samples, 50, 0)
    human = summary[summary.cell == "greedy"].assign(cell="human")
    zipf = human.head(1).assign(metric="zipf", mean=1.1, ci_low=1.0, ci_high=1.2)
    timings = kv_timings(0)
    table = metrics_table({"sp_repetition": pd.concat([summary, human, zipf]),
                           "kv_summary": kvsummary.summarize_timings(timings).assign(engine="eager")}, None, {})
    assert ("sampling", "zipf", "human") in set(zip(table.experiment, table.metric, table.key, strict=True))
    assert set(table.loc[table.experiment == "kvcache", "key"].str.endswith("[eager]")) == {True}


# ---------------------------------------------------------------------------------------------- diff


def test_two_identical_runs_show_no_change():
    d = verdicts.diff_metrics(run_metrics(timing_seed=0), run_metrics(timing_seed=0))
    assert set(d["verdict"]) == {verdicts.UNCHANGED}


def test_reruns_with_timing_wobble_only_move_timings_within_noise():
    d = verdicts.diff_metrics(run_metrics(timing_seed=0), run_metrics(timing_seed=1))
    assert changed(d).empty
    timing_rows = d[d.noise_kind == REP_RANGE]
    assert (timing_rows["delta"].abs() > 0).any()  # the timings did move ...
    assert verdicts.WITHIN in set(timing_rows["verdict"])  # ... and were judged as noise
    assert (d.loc[d.noise_kind == EXACT, "verdict"] == verdicts.UNCHANGED).all()


def test_timings_from_too_few_reruns_have_no_noise_estimate():
    # the quick config runs 1-2 reruns: a min-max over them is no noise estimate, so never "changed"
    d = verdicts.diff_metrics(run_metrics(timing_seed=0, reps=2), run_metrics(timing_seed=1, reps=2))
    assert changed(d).empty
    assert (d.loc[d.noise_kind == REP_RANGE, "verdict"] == verdicts.NO_NOISE).all()


def test_a_changed_scheme_changes_only_its_rows_and_what_derives_from_them():
    old = run_metrics()
    new = run_metrics(quant_changes={"int4_per_channel_sym": 0.2}, statuses={"M4": "fail"})
    d = changed(verdicts.diff_metrics(old, new))
    touched = set(zip(d.experiment, d.metric, d.key, strict=True))
    assert ("quant", "delta_loss", "int4_per_channel_sym") in touched
    assert ("quant", "chosen_scheme", "chosen") in touched
    allowed = {t for t in touched if t[:1] == ("quant",) and t[2] == "int4_per_channel_sym"}
    assert touched - allowed == {("quant", "chosen_scheme", "chosen"), ("milestones", "status", "M4")}


def test_a_change_inside_the_floor_is_within_noise():
    d = verdicts.diff_metrics(run_metrics(), run_metrics(quant_changes={"int3_per_tensor_sym": 0.300 + FLOOR / 2}))
    row = d[(d.metric == "delta_loss") & (d.key == "int3_per_tensor_sym")].iloc[0]
    assert row.verdict == verdicts.WITHIN and row.delta == pytest.approx(FLOOR / 2)


def test_a_milestone_flip_heads_the_diff():
    old = run_metrics()
    new = run_metrics(quant_changes={"int8_per_channel_sym": 0.5}, statuses={"M2": "fail"})
    d = verdicts.diff_metrics(old, new)
    assert d.iloc[0].verdict == verdicts.FLIPPED and d.iloc[0].key == "M2"
    assert d.iloc[1].verdict == verdicts.CHANGED
    markdown = changes_markdown(diff.Changes("old", d))
    assert markdown.index("| flipped | milestones |") < markdown.index("| changed | quant |")


def test_timings_from_another_machine_are_not_comparable():
    d = verdicts.diff_metrics(run_metrics(machine=MACHINE_A), run_metrics(timing_seed=1, machine=MACHINE_B))
    timings = d[d.noise_kind == REP_RANGE]
    assert not timings.empty and (timings["verdict"] == verdicts.NOT_COMPARABLE).all()
    assert (d.loc[d.noise_kind == EXACT, "verdict"] == verdicts.UNCHANGED).all()  # machine-free numbers still compare


def test_a_contended_run_makes_timings_not_comparable():
    d = verdicts.diff_metrics(run_metrics(), run_metrics(timing_seed=1, contended=True))
    assert (d.loc[d.noise_kind == REP_RANGE, "verdict"] == verdicts.NOT_COMPARABLE).all()


def test_one_contended_group_job_leaves_the_other_groups_comparable():
    """The job of group small k=4 ran beside other work: its rows are contended, in the summary, the metrics
    and the diff; small k=2's are not, and compare as usual."""
    new = run_metrics(timing_seed=1, contended_groups=(("small", 4),))
    spec = new[(new.experiment == "speculative") & new.timing]
    assert spec.loc[spec.key.str.startswith("small k=4"), "contended"].all()
    assert not spec.loc[spec.key.str.startswith("small k=2"), "contended"].any()
    d = verdicts.diff_metrics(run_metrics(), new)
    timed = d[(d.experiment == "speculative") & d.timing]
    incomparable = timed.verdict == verdicts.NOT_COMPARABLE
    assert incomparable[timed.key.str.startswith("small k=4")].all()
    assert not incomparable[timed.key.str.startswith("small k=2")].any()
    assert (timed.loc[incomparable, "cause_kind"] == "contended").all()


def test_timing_outside_the_widened_range_is_changed():
    old, new = run_metrics(), run_metrics()
    row = (new.experiment == "kvcache") & (new.metric == "speed_ratio") & (new.key == "64")
    new.loc[row, ["value", "low", "high"]] = new.loc[row, ["value", "low", "high"]] * 2
    d = verdicts.diff_metrics(old, new)
    assert changed(d)[["metric", "key"]].values.tolist() == [["speed_ratio", "64"]]


def test_added_and_removed_rows_are_listed():
    old = run_metrics()
    new = run_metrics()[lambda t: t.experiment != "speculative"]
    new = pd.concat([new, new[new.metric == "kept"].head(1).assign(key="new_cell")])
    d = verdicts.diff_metrics(old, new)
    assert (d.loc[d.experiment == "speculative", "verdict"] == verdicts.REMOVED).all()
    assert d.loc[d.key == "new_cell", "verdict"].tolist() == [verdicts.ADDED]


def test_figure_is_a_png():
    png = diff_figure(run_metrics(), run_metrics(quant_changes={"int4_g32_sym": 0.1}))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_compares_against_the_previous_ledger_entry(tmp_path, capsys, monkeypatch):
    from inferlab.jobs.tables import write_table
    from inferlab.review import ledger

    monkeypatch.chdir(tmp_path)
    history = tmp_path / "results" / "history"
    first = ledger.append_run(history, run_metrics(), {}, [])
    second_table = run_metrics(statuses={"M3": "fail"})
    second = ledger.append_run(history, second_table, {"run_id": "z-second"}, [])
    assert changes.main([str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "Changes since run " + first.name in out and "| flipped | milestones | status | M3 |" in out
    # no arguments: NEW is results/metrics.parquet, whose own ledger entry (the latest) is skipped
    write_table(second_table, tmp_path / "results" / "metrics.parquet")
    assert changes.main(["--figure", "f.png", "--table", "d.parquet", "--markdown", "d.md"]) == 0
    assert f"Changes since run {first.name}" in capsys.readouterr().out
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert pd.read_parquet(tmp_path / "d.parquet").iloc[0].verdict == verdicts.FLIPPED
    assert "M3" in (tmp_path / "d.md").read_text()


def test_cli_pin_then_diff_against_the_reference(tmp_path, capsys):
    from inferlab.jobs.tables import write_table

    new = tmp_path / "metrics.parquet"
    write_table(run_metrics(), new)
    reference = tmp_path / "reference" / "metrics.parquet"
    assert changes.main(["--pin", "--reference", str(reference), str(new)]) == 0
    history = tmp_path / "empty-history"
    assert changes.main(["--history", str(history), "--reference", str(reference), str(reference), str(new)]) == 0
    assert "No metric changed beyond its noise." in capsys.readouterr().out
    missing = tmp_path / "nothing.parquet"
    assert changes.main([str(missing), str(new)]) == 2


def test_changes_since_uses_the_latest_entry_before_this_run_is_appended(tmp_path):
    from inferlab.review import ledger

    history, reference = tmp_path / "history", tmp_path / "reference.parquet"
    nothing = diff.changes_since(run_metrics(), history, reference)
    assert nothing.old_label is None and "nothing to compare" in nothing.reason
    entry = ledger.append_run(history, run_metrics(), {}, [])
    changes = diff.changes_since(run_metrics(), history, reference)  # identical: still compared, not skipped
    assert changes.old_label == f"run {entry.name}" and changed(changes.table).empty
    assert changes.figure_png[:4] == b"\x89PNG"


def test_milestone_style_stamps_and_per_experiment_overrides_are_flattened():
    m4 = {"model": {"model": "ref_baseline", "checkpoint_sha256": "abc"}, "machine": MACHINE_B, "repeats": "3"}
    stamps = {"model": "ref_baseline", "machine": MACHINE_A, "experiments": {"quant": m4}}
    table = metrics_table({"quant_summary": quant_summary(), "kv_summary": kvsummary.summarize_timings(kv_timings(0))},
                          None, stamps)
    quant, kv = table[table.experiment == "quant"], table[table.experiment == "kvcache"]
    assert set(quant["machine_cpu_model"]) == {"CPU B"} and set(quant["checkpoint_sha256"]) == {"abc"}
    assert set(kv["machine_cpu_model"]) == {"CPU A"} and kv["checkpoint_sha256"].isna().all()


def test_milestone_card_lines_name_the_flip_and_the_change():
    d = verdicts.diff_metrics(run_metrics(), run_metrics(quant_changes={"int4_per_channel_sym": 0.2},
                                                     statuses={"M4": "fail"}))
    lines = diff_summary.milestone_change_lines(d)
    # the flip, then counts; "Changes since …" lists the metrics, so the card names none
    changed = int((d.experiment.isin(("quant", "models")) & (d.verdict == verdicts.CHANGED)).sum())
    assert lines["M4"].startswith(f"flipped pass → fail; {changed} changed"), lines["M4"]
    assert "chosen_scheme" not in lines["M4"]
    assert "flipped" not in lines["M1"] and "changed" not in lines["M1"]


def test_a_reference_from_another_configuration_is_flagged(tmp_path, capsys):
    """Pinning keeps the run's config hash; a diff or report against a run of another config says so."""
    from inferlab.jobs.tables import write_table
    from inferlab.review import ledger

    history = tmp_path / "history"
    full = ledger.append_run(history, run_metrics(), {"config_sha256": "a" * 64}, [])
    reference = tmp_path / "reference" / "metrics.parquet"
    assert changes.main(["--pin", "--reference", str(reference), str(full)]) == 0
    assert diff.config_of(reference) == "a" * 64
    quick = tmp_path / "metrics.parquet"
    write_table(run_metrics(), quick, provenance={"config_sha256": "b" * 64})
    capsys.readouterr()
    assert changes.main(["--reference", str(reference), str(reference), str(quick)]) == 0
    assert "different configurations" in capsys.readouterr().out
    other = diff.changes_since(run_metrics(), tmp_path / "empty", reference, new_config="b" * 64)
    same = diff.changes_since(run_metrics(), tmp_path / "empty", reference, new_config="a" * 64)
    assert "different configurations" in other.config_note and same.config_note is None
    # the report: a warning under "Changes since …", and each card says it compares across configurations
    from inferlab.report.milestones.common import Milestone
    from inferlab.report.opening import opening_blocks

    def shown(changes) -> tuple[list[str], str]:
        blocks = opening_blocks([Milestone("M4", "M4 Quantization", "pass", "")], changes)
        return [b[1] for b in blocks if b[0] == "warning"], next(b[4] for b in blocks if b[0] == "card")

    (warning,), card = shown(other)
    assert "different configurations" in warning and "(a run of another configuration)" in card
    assert shown(same)[0] == [] and "another configuration" not in shown(same)[1]


def test_the_configuration_warning_names_the_settings_and_ignores_where_the_corpus_lives():
    """Two runs of one config that read the corpus from two paths ran the same thing (its content
    is in the lineage): no warning. A quick run against a full one: the warning names what differs."""
    full = {"config": {"corpus_path": "/work/shared/data/corpus.txt", "training": {"defaults": {"steps": 500}},
                       "quantization": {"schemes": [f"int{b}_g{g}" for b in (3, 4, 8) for g in (32, 64, 128)]}}}
    moved = {"config": {**full["config"], "corpus_path": "../shared/data/corpus.txt"}}
    assert diff.config_note("a" * 64, "b" * 64, full, moved) is None
    quick = {"config": {**moved["config"], "training": {"defaults": {"steps": 40}},
                        "quantization": {"schemes": ["int4_g32", "int8_g32"]}}}
    note = diff.config_note("a" * 64, "c" * 64, full, quick)
    assert ("(quantization.schemes [9 entries] → ['int4_g32', 'int8_g32']; training.defaults.steps 500 → 40)"
            in note)
    assert "corpus_path" not in note
    assert "config sha256 aaaaaaaaaaaa → cccccccccccc" in diff.config_note("a" * 64, "c" * 64)  # no records
