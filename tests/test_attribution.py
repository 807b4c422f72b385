"""Every change explained: two small runs on disk, one edit between them, and the diff names it.

Each run is a miniature of the workflow's chain (corpus → checkpoint → per-scheme tables → quant
summary, and a timing table), written with the real job lineage, tables and causes record; the
code hashes are the real ones of this checkout's scripts (or of a copy with one module edited).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from inferlab.jobs import lineage as lineage_mod
from inferlab.jobs.lineage import CHECKOUT, code_sha256, file_sha256, job_lineage, set_job_lineage
from inferlab.jobs.tables import write_table
from inferlab.review import diff_summary, verdicts
from inferlab.review.attribution import CODE, CONFIG, INPUT, MACHINE, UNEXPLAINED, Cause, render
from inferlab.review.lineage_graph import causes_record
from inferlab.review.metrics import COLUMNS, EXACT, NOISE_FLOOR, REP_RANGE, STAMP_COLUMNS

SCRIPTS = {"train_model": "scripts/training_model.py", "quant_scheme": "scripts/quant_scheme.py",
           "quant_summary": "scripts/quant_summary.py", "kvcache_summary": "scripts/kvcache_summary.py",
           "sampling_repetition": "scripts/sampling_repetition.py", "kvcache_timing": "scripts/kvcache_timing.py"}
COMPUTE = {"train_model", "quant_scheme", "kvcache_timing"}
MACHINE_STAMP = {"cpu_model": "CPU A", "node": "vm", "fingerprint": "f00", "cpu_cores": 2, "torch_threads": 2,
                 "device": "cpu", "device_name": "CPU A"}


def code_root_with_edit(tmp_path: Path, module: str) -> Path:
    """A copy of this checkout's code with one semantic edit to `module` (e.g. inferlab/quant/gptq.py)."""
    root = tmp_path / "edited-code"
    shutil.copytree(CHECKOUT / "inferlab", root / "inferlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(CHECKOUT / "scripts", root / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    target = root / module
    target.write_text(target.read_text(encoding="utf-8") + "\nEDITED_BETWEEN_RUNS = 1\n", encoding="utf-8")
    return root


def _job(rule: str, code_root: Path, **settings) -> dict:
    return {"code_sha256": code_sha256(code_root / SCRIPTS[rule], code_root, rule in COMPUTE), **settings}


def _write(path: str, df: pd.DataFrame, rule: str, params: dict, inputs: list[str], machine: dict) -> None:
    set_job_lineage(job_lineage(rule, params, inputs))
    try:
        write_table(df, path, provenance={"machine": machine})
    finally:
        set_job_lineage(None)


def make_run(workdir: Path, *, damp: float = 0.01, steps: int = 500, code_root: Path = CHECKOUT,
             node: str = "vm", fingerprint: str = "f00", drift: dict[str, float] | None = None,
             training_seconds: float = 60.0, timing_reads_weights: bool = True,
             measured_ms: float = 1.0) -> tuple[pd.DataFrame, dict]:
    """One run in workdir: (its metrics table, its causes record). Numbers follow from the settings,
    as a deterministic pipeline's would; `drift` adds to metric values behind the lineage's back."""
    workdir.mkdir(parents=True, exist_ok=True)
    machine = {**MACHINE_STAMP, "node": node, "fingerprint": fingerprint}
    config = {"training": {"defaults": {"steps": steps}}, "quantization": {"gptq": {"damp": damp}},
              "kvcache": {"lengths": [16]}}
    cwd = Path.cwd()
    try:
        os.chdir(workdir)
        Path("data").mkdir(exist_ok=True)
        Path("data/corpus.txt").write_text("corpus", encoding="utf-8")
        model_dir = Path("results/models/ref")
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "model.safetensors").write_bytes(f"weights after {steps} steps".encode())
        val_loss = 4.0 - steps / 10_000
        train = job_lineage("train_model", _job("train_model", code_root, train={"steps": steps}),
                            ["data/corpus.txt"])
        (model_dir / "meta.json").write_text(json.dumps({
            "weights_sha256": file_sha256(model_dir / "model.safetensors"), "val_loss": val_loss,
            "wall_time_s": training_seconds, "lineage": train, "machine": machine}), encoding="utf-8")
        weights = str(model_dir / "model.safetensors")
        scheme_paths = []
        for scheme, gptq in (("int8", None), ("gptq_4b", {"damp": damp})):
            path = f"results/quant/schemes/{scheme}.parquet"
            delta = (0.001 if gptq is None else 0.01 + damp) + (4.0 - val_loss) / 100
            _write(path, pd.DataFrame({"scheme": [scheme], "delta_loss": [delta]}), "quant_scheme",
                   _job("quant_scheme", code_root, scheme=scheme, gptq=gptq), [weights], machine)
            scheme_paths.append(path)
        summary = pd.concat([pd.read_parquet(p) for p in scheme_paths], ignore_index=True)
        _write("results/quant/summary.parquet", summary, "quant_summary",
               _job("quant_summary", code_root, schemes=["int8", "gptq_4b"], gptq={"damp": damp}), scheme_paths,
               machine)
        timings = "results/kvcache/timings/len16.parquet"
        _write(timings, pd.DataFrame({"length": [16], "ms": [measured_ms]}), "kvcache_timing",
               _job("kvcache_timing", code_root, length=16), [weights, str(model_dir / "meta.json")], machine)
        _write("results/kvcache/summary.parquet", pd.DataFrame({"length": [16], "ms": [measured_ms]}),
               "kvcache_summary", _job("kvcache_summary", code_root, lengths=[16]),
               [timings] + ([weights, str(model_dir / "meta.json")] if timing_reads_weights
                            else [str(model_dir / "meta.json")]), machine)
        _write("results/sampling/repetition.parquet", pd.DataFrame({"cell": ["greedy"], "mean": [0.3]}),
               "sampling_repetition", _job("sampling_repetition", code_root, n_boot=200), [weights], machine)
        sources = {"quant_summary": "results/quant/summary.parquet", "kv_summary": "results/kvcache/summary.parquet",
                   "sp_repetition": "results/sampling/repetition.parquet", "models/ref": str(model_dir / "meta.json")}
        record = causes_record(sources, SCRIPTS, code_root, config, machine, {"bandwidth_GB_per_s": 100.0})
    finally:
        os.chdir(cwd)
    rows = [_metric("quant", "delta_loss", r.scheme, r.delta_loss, NOISE_FLOOR, "quant_summary", machine)
            for r in summary.itertuples()]
    rows.append(_metric("models", "val_loss", "ref", val_loss, NOISE_FLOOR, "models/ref", machine))
    rows.append(_metric("models", "params", "ref", 1000.0, EXACT, "models/ref", machine))
    rows.append(_metric("kvcache", "ms_per_token", "16 cache", measured_ms, REP_RANGE, "kv_summary", machine,
                        timing=True))
    rows.append(_metric("sampling", "seq_rep_4", "greedy", 0.3, EXACT, "sp_repetition", machine))
    table = pd.DataFrame(rows, columns=[*COLUMNS, *STAMP_COLUMNS])
    for (experiment, key), amount in (drift or {}).items():
        table.loc[(table.experiment == experiment) & (table.key == key), "value"] += amount
    return table, record


def _metric(experiment, metric, key, value, kind, source, machine, timing=False) -> dict:
    spread = 0.02 if kind == NOISE_FLOOR else 0.01
    return {"experiment": experiment, "metric": metric, "key": key, "value": float(value), "text_value": None,
            "unit": "", "low": value - spread if kind != EXACT else float("nan"),
            "high": value + spread if kind != EXACT else float("nan"), "noise_kind": kind, "timing": timing,
            "higher_is_better": False, "source": source, "model": "ref", "checkpoint_sha256": None,
            "machine_cpu_model": machine["cpu_model"], "machine_device": "cpu",
            "machine_device_name": machine["device_name"], "machine_node": machine["node"],
            "machine_fingerprint": machine["fingerprint"], "repeats": "3", "baseline": "none", "contended": False}


def explained(tmp_path: Path, old_kwargs: dict, new_kwargs: dict) -> pd.DataFrame:
    old, old_record = make_run(tmp_path / "old", **old_kwargs)
    new, new_record = make_run(tmp_path / "new", **new_kwargs)
    return verdicts.diff_metrics(old, new, old_record, new_record)


def causes_of(d: pd.DataFrame) -> dict[tuple[str, str], str]:
    return {(r.experiment, r.key): r.cause for r in d.itertuples() if isinstance(r.cause, str)}


def section(d, machine=None) -> str:
    """The "Changes since …" section as the bundle's changes.md holds it."""
    from inferlab.report.changes import changes_markdown
    from inferlab.review.diff import Changes

    return changes_markdown(Changes("old", d, machine=machine, new_label="new"))


@pytest.fixture(autouse=True)
def _no_job_lineage():
    yield
    lineage_mod.set_job_lineage(None)


def test_two_identical_runs_report_nothing(tmp_path):
    d = explained(tmp_path, {}, {})
    assert causes_of(d) == {}
    assert diff_summary.reproducibility(d)["identical"] == diff_summary.reproducibility(d)["total"] == 5


def test_a_config_edit_of_one_scheme_is_named_with_its_values(tmp_path):
    d = explained(tmp_path, {"damp": 0.01}, {"damp": 0.05})
    causes = causes_of(d)
    assert causes == {("quant", "gptq_4b"): "config: quantization.gptq.damp 0.01 → 0.05"}
    assert d.set_index("key").loc["gptq_4b", "verdict"] == verdicts.CHANGED
    markdown = section(d)
    assert "<summary>config: quantization.gptq.damp 0.01 → 0.05 — moved 1 metric(s)</summary>" in markdown


@pytest.mark.parametrize(("module", "moved"), [("inferlab/quant/gptq.py", ("quant", "gptq_4b")),
                                               ("inferlab/sampling/aggregate.py", ("sampling", "greedy")),
                                               ("inferlab/core/model.py", ("quant", "gptq_4b"))])
def test_a_code_edit_names_the_module(tmp_path, module, moved):
    edited = code_root_with_edit(tmp_path, module)
    d = explained(tmp_path, {"drift": {}}, {"code_root": edited, "drift": {moved: 0.1}})
    cause = causes_of(d)[moved]
    # quant_summary imports no quantisation code: an edit there reaches it through the scheme tables
    assert f"{CODE}: " in cause and module in cause, cause
    assert set(causes_of(d)) == {moved}  # what did not move needs no cause


def test_a_retraining_is_named_by_the_training_setting_that_caused_it(tmp_path):
    d = explained(tmp_path, {"steps": 500}, {"steps": 600})
    causes = causes_of(d)
    assert causes[("models", "ref")] == "config: training.defaults.steps 500 → 600"
    assert causes[("quant", "int8")] == ("input: checkpoint ref retrained: config: training.defaults.steps "
                                         "500 → 600")
    assert causes[("quant", "gptq_4b")] == causes[("quant", "int8")]
    groups = diff_summary.cause_groups(d[d.cause.notna()])
    assert [g[0] for g in groups] == [CONFIG, INPUT]


def test_a_job_whose_code_changed_also_names_its_retrained_input_and_its_other_machine(tmp_path):
    """The sampling job's own module was edited, and the checkpoint it reads was retrained on another
    machine: any of the three can be what moved its number, so the diff names all three, not only
    the nearest (on a CPU with other bf16 kernels, the retraining alone moves every number below it)."""
    edited = code_root_with_edit(tmp_path, "inferlab/sampling/aggregate.py")
    d = explained(tmp_path, {"node": "node-a"},
                  {"node": "node-b", "steps": 600, "code_root": edited, "drift": {("sampling", "greedy"): 0.1}})
    cause = causes_of(d)[("sampling", "greedy")]
    assert "code: sampling_repetition: inferlab/sampling/aggregate.py" in cause, cause
    assert "input: checkpoint ref retrained: config: training.defaults.steps 500 → 600" in cause, cause
    assert "machine: sampling_repetition ran on another machine: node node-a → node-b" in cause, cause
    assert causes_of(d)[("models", "ref")].startswith("config: training.defaults.steps 500 → 600 · machine: ")


def test_a_group_reads_as_its_nearest_cause_then_one_line_per_further_cause(tmp_path):
    """A reviewer reads the job's own change as the heading, then each input with what moved it, and
    the jobs that ran on the machine change the diff names once as one line, not that change again."""
    edited = code_root_with_edit(tmp_path, "inferlab/sampling/aggregate.py")
    d = explained(tmp_path, {"node": "node-a"},
                  {"node": "node-b", "steps": 600, "code_root": edited, "drift": {("sampling", "greedy"): 0.1}})
    markdown = section(d, Cause.changed(MACHINE, {"node": ("node-a", "node-b")}))
    opened = markdown.split("<summary>code: sampling_repetition: inferlab/sampling/aggregate.py", 1)[1]
    group = opened.split("**Further causes**", 1)[1].split("**Metrics with this cause**")[0]
    assert group.split() == [
        "-", "also", *"input: checkpoint ref retrained — from config: training.defaults.steps 500 → 600".split(),
        "-", "also", *"machine: sampling_repetition and train_model ran on the other machine named above".split()]
    assert markdown.count("node-a → node-b") == 1, markdown


def test_causes_are_records_the_stored_lineage_reproduces_and_only_render_makes_their_text(tmp_path):
    """The diff from two ledger entries (their lineage stored as JSON) holds the same cause records as the
    diff of the runs in memory; the `cause` text beside them, also in the table the diff CLI writes, is
    render()'s, and no record holds text of its own (no "old → new")."""
    from inferlab.report import changes
    from inferlab.review import diff, ledger
    from inferlab.review.attribution import CAUSE_SEPARATOR

    edited = code_root_with_edit(tmp_path, "inferlab/sampling/aggregate.py")
    old, old_record = make_run(tmp_path / "old", node="node-a")
    new, new_record = make_run(tmp_path / "new", node="node-b", steps=600, code_root=edited,
                               drift={("sampling", "greedy"): 0.1, ("kvcache", "16 cache"): 0.5})
    history = tmp_path / "history"
    entries = [ledger.append_run(history, table, {"run_id": name, "causes": record}, [])
               for name, table, record in (("a-old", old, old_record), ("b-new", new, new_record))]
    assert changes.main([*map(str, entries), "--table", str(tmp_path / "d.parquet")]) == 0
    in_memory = verdicts.diff_metrics(old, new, old_record, new_record)
    stored = diff.compare(entries[0], old, new, diff.record_of(entries[1]), "new", None).table
    assert stored["causes"].tolist() == in_memory["causes"].tolist()
    assert {c.kind for causes in stored["causes"] for c in causes} >= {CODE, CONFIG, INPUT, MACHINE}
    texts = [CAUSE_SEPARATOR.join(map(render, causes)) for causes in stored["causes"]]
    written = pd.read_parquet(tmp_path / "d.parquet")
    assert stored["cause"].fillna("").tolist() == texts == written["cause"].fillna("").tolist()

    def values(cause):
        yield from (cause.rule, *(cause.field or ()), *cause.old, *cause.new)
        yield from values(cause.via) if cause.via else ()

    assert not [v for causes in stored["causes"] for c in causes for v in values(c) if "→" in str(v)]


def test_a_timing_measured_again_is_noise_not_an_unexplained_job(tmp_path):
    """The timing table upstream of a summary holds new numbers though its job records nothing new:
    it was measured again, which a timing always is; nothing deterministic is blamed."""
    d = explained(tmp_path, {"measured_ms": 1.0}, {"measured_ms": 1.6})
    row = d.set_index("metric").loc["ms_per_token"]
    assert row["cause"] == ("noise: results/kvcache/timings/len16.parquet measured again, with nothing else its "
                            "job records differing"), row["cause"]  # which table: the note holds beside other causes
    assert set(causes_of(d)) == {("kvcache", "16 cache")}


@pytest.mark.parametrize("reads_weights", [True, False])
def test_a_retraining_to_the_same_weights_is_no_cause_though_its_meta_records_another_time(tmp_path, reads_weights):
    """The speculative jobs read a checkpoint's meta.json beside its weights, and their summary reads
    the meta.json alone; a training that took longer but wrote the same weights changes nothing
    downstream of either."""
    faster = {("kvcache", "16 cache"): -0.5}  # the timing moved: what made it move?
    runs = {"timing_reads_weights": reads_weights}
    same = causes_of(explained(tmp_path, {**runs, "training_seconds": 60.0},
                               {**runs, "training_seconds": 75.0, "drift": faster}))
    assert same[("kvcache", "16 cache")].startswith("noise: "), same  # measured again, nothing else
    retrained = causes_of(explained(tmp_path / "steps", {**runs, "steps": 500},
                                    {**runs, "steps": 600, "drift": faster}))
    assert retrained[("kvcache", "16 cache")].startswith("input: checkpoint ref retrained: config:")


def test_a_node_change_makes_a_timing_not_comparable_and_says_so(tmp_path):
    d = explained(tmp_path, {"node": "node-a"}, {"node": "node-b", "drift": {("kvcache", "16 cache"): 0.05}})
    row = d.set_index("metric").loc["ms_per_token"]
    assert row["verdict"] == verdicts.NOT_COMPARABLE
    assert row["cause_kind"] == MACHINE and "node node-a → node-b" in row["cause"]
    assert set(causes_of(d)) == {("kvcache", "16 cache")}  # the deterministic numbers did not move


@pytest.mark.parametrize("fingerprint", ["f00", "f01"], ids=["equal fingerprints", "different fingerprints"])
def test_the_same_machine_line_and_the_machine_heading_agree(tmp_path, fingerprint):
    """One definition of the same machine: the reproducibility line, the run-level heading and every
    job's cause all follow the fingerprint (a host named alike on another machine is another machine)."""
    from inferlab.review.diff import runs_machine

    old, old_record = make_run(tmp_path / "old")
    new, new_record = make_run(tmp_path / "new", fingerprint=fingerprint, drift={("kvcache", "16 cache"): 0.05})
    machine = runs_machine(old, new, old_record, new_record)
    d = verdicts.diff_metrics(old, new, old_record, new_record)
    markdown = section(d, machine)
    timing = d.set_index("metric").loc["ms_per_token"]
    if fingerprint == "f00":
        assert machine is None and "(the same machine)" in markdown and "another machine" not in markdown
        assert timing["verdict"] != verdicts.NOT_COMPARABLE and "fingerprint" not in markdown, markdown
    else:
        assert render(machine, with_kind=False) == "fingerprint f00 → f01", machine
        assert "(another machine: fingerprint f00 → f01)" in markdown and "the same machine" not in markdown
        assert timing["verdict"] == verdicts.NOT_COMPARABLE and "fingerprint f00 → f01" in timing["cause"]
    # the same answer without the records, from the metrics' own stamps
    assert runs_machine(old, new, None, None) == machine


def test_timings_another_machine_makes_not_comparable_fold_into_one_line(tmp_path):
    """On another machine every timing is not comparable, as expected: one line, the groups folded under it;
    a change with another cause stays open beside it. The tables name metrics and noise as a reader would."""
    from inferlab.experiments import display_name
    from inferlab.report.changes import change_groups
    from inferlab.review.diff import runs_machine

    old, old_record = make_run(tmp_path / "old")
    new, new_record = make_run(tmp_path / "new", fingerprint="f01", damp=0.05,
                               drift={("kvcache", "16 cache"): 0.05})
    machine = runs_machine(old, new, old_record, new_record)
    d = verdicts.diff_metrics(old, new, old_record, new_record)
    folded, changed = change_groups(d, machine)
    assert folded[0][:2] == ("details", "1 timing metric not comparable: another machine (fingerprint f00 → f01)")
    (group,) = folded[0][2]  # its one cause, opened: the metric it moved
    assert group[0] == "details" and "ms/token" in group[2][-1][1]["metric"].tolist()
    assert group[2][-1][1]["noise"].tolist() == ["min–max over reruns"]
    assert changed and changed[0][1].startswith("config: quantization.gptq.damp 0.01 → 0.05"), changed
    rows = changed[0][2][-1][1]  # the deterministic change, listed with its cause
    assert (display_name("delta_loss"), "gptq_4b", "± noise floor") in set(
        zip(rows["metric"], rows["key"], rows["noise"], strict=True))
    assert not any((b[2][-1][1]["verdict"] == "not comparable").any() for b in changed)
    same, _ = change_groups(verdicts.diff_metrics(old, make_run(tmp_path / "same", damp=0.05)[0], old_record,
                                                  new_record), None)
    assert not same
    # a card counts, and names the machine change once; "Changes since …" names the machines
    card = diff_summary.milestone_change_lines(d, machine=machine)["M1"]
    assert card.startswith("1 not comparable; cause: machine: ") and card.count("f00 → f01") == 1, card


def test_a_long_cause_folds_into_one_line_and_opens_onto_all_of_it(tmp_path, monkeypatch):
    from inferlab.report.changes import change_groups

    old, old_record = make_run(tmp_path / "old")
    new, new_record = make_run(tmp_path / "new", damp=0.05)
    monkeypatch.setattr(diff_summary, "CARD_CAUSE_CHARS", 20)
    (group,) = change_groups(verdicts.diff_metrics(old, new, old_record, new_record))[1]
    heading = "config: quantization.gptq.damp 0.01 → 0.05"
    assert group[1] == f"{heading[:19].rstrip()}… — moved 1 metric(s)" and group[2][0] == ("p", heading)


def test_a_hand_altered_deterministic_value_is_unexplained_and_heads_the_diff(tmp_path):
    old, old_record = make_run(tmp_path / "old")
    altered = old.copy()
    altered.loc[altered.metric == "params", "value"] += 1.0
    d = verdicts.diff_metrics(old, altered, old_record, json.loads(json.dumps(old_record)))
    assert d.iloc[0]["cause_kind"] == UNEXPLAINED and d.iloc[0]["metric"] == "params"
    assert "**Warning:** Unexplained: 1 deterministic metric(s) moved" in section(d)


def test_summation_order_differences_count_as_identical_within_the_stated_tolerance(tmp_path):
    old, record = make_run(tmp_path / "old")
    new = old.copy()
    new.loc[new.metric == "params", "value"] *= 1 + 1e-15
    d = verdicts.diff_metrics(old, new, record, record)
    assert causes_of(d) == {}
    summary = diff_summary.reproducibility(d)
    assert (summary["identical"], summary["within_tolerance"], summary["differ"]) == (4, 1, 0)
    assert "1 agree within float summation order" in diff_summary.reproducibility_line(d, "old")


def test_without_an_old_record_a_cpu_change_is_named_from_the_stamps(tmp_path):
    old, _ = make_run(tmp_path / "old")
    new, record = make_run(tmp_path / "new", steps=600)
    old["machine_cpu_model"], old["machine_fingerprint"] = "CPU Z", "f99"  # the fingerprint hashes the CPU model
    d = verdicts.diff_metrics(old, new, None, record)
    cause = causes_of(d)[("models", "ref")]
    assert cause.startswith(f"{MACHINE}: ") and "CPU Z → CPU A" in cause and "records no lineage" in cause


def test_a_timing_both_runs_reused_is_unchanged_even_across_machines(tmp_path):
    """A table the second run did not re-measure carries the same numbers: nothing to compare."""
    old, record = make_run(tmp_path / "old", node="node-a")
    new = old.assign(machine_node="node-b")
    d = verdicts.diff_metrics(old, new, record, record)
    assert d.set_index("metric").loc["ms_per_token", "verdict"] == verdicts.UNCHANGED
    moved = new.copy()
    moved.loc[moved.metric == "ms_per_token", "value"] = 1.5
    d = verdicts.diff_metrics(old, moved, record, record)
    assert d.set_index("metric").loc["ms_per_token", "verdict"] == verdicts.NOT_COMPARABLE


def test_the_report_warns_on_the_first_screen_and_cards_carry_the_cause(tmp_path):
    from inferlab.report.changes import change_groups, unexplained_warnings

    old, record = make_run(tmp_path / "old")
    new, new_record = make_run(tmp_path / "new", damp=0.05)
    new.loc[new.metric == "params", "value"] += 1.0  # behind the lineage's back
    d = verdicts.diff_metrics(old, new, record, new_record)
    (warning,) = unexplained_warnings(d)
    assert warning[0] == "warning" and "models params ref" in warning[1]
    lines = diff_summary.milestone_change_lines(d)
    assert "config: quantization.gptq.damp 0.01 → 0.05" in lines["M4"] and "Changes since" in lines["M4"], lines["M4"]
    headings = [block[1] for block in change_groups(d)[1]]
    assert headings[0].startswith("unexplained: ") and headings[1].startswith("config: quantization.gptq.damp")


def test_a_run_from_before_the_fingerprint_makes_timings_not_comparable(tmp_path):
    """An older table without the fingerprint column: its machines cannot be told apart, so not comparable."""
    new, record = make_run(tmp_path / "new", drift={("kvcache", "16 cache"): 0.05})
    old = make_run(tmp_path / "old")[0].drop(columns=["machine_fingerprint", "source"])
    d = verdicts.diff_metrics(old, new, None, record)
    row = d.set_index("metric").loc["ms_per_token"]
    assert row["verdict"] == verdicts.NOT_COMPARABLE and "fingerprint" in row["cause"]


def test_a_numeric_stack_upgrade_is_named_as_the_library(tmp_path, monkeypatch):
    old, old_record = make_run(tmp_path / "old")
    versions = {**lineage_mod.stack_versions(), "torch": "9.9.9"}
    monkeypatch.setattr(lineage_mod, "stack_versions", lambda: versions)
    new, new_record = make_run(tmp_path / "new", drift={("models", "ref"): 0.001})
    d = verdicts.diff_metrics(old, new, old_record, new_record)
    cause = causes_of(d)[("models", "ref")]
    assert cause.startswith("library: ") and "→ 9.9.9" in cause, cause


def _with_milestone(table: pd.DataFrame, status: str, machine: dict) -> pd.DataFrame:
    row = {**_metric("milestones", "status", "M4", 1.0 if status == "pass" else 0.0, EXACT, "milestones/M4",
                     machine), "text_value": status}
    return pd.concat([table, pd.DataFrame([row])], ignore_index=True)


@pytest.mark.parametrize(("new_status", "kind"), [("stale", CODE), ("fail", UNEXPLAINED)])
def test_a_milestone_turned_stale_is_explained_by_the_staleness_check_and_any_other_flip_is_not(
        tmp_path, new_status, kind):
    """The report marks a milestone stale when its tables' code no longer is the checkout's: the tables
    are the same in both runs, so nothing upstream differs, yet the cause is known. A pass → fail with
    the same tables is still a determinism bug."""
    old, record = make_run(tmp_path / "old")
    machine = {**MACHINE_STAMP, "node": "vm"}
    d = verdicts.diff_metrics(_with_milestone(old, "pass", machine), _with_milestone(old, new_status, machine),
                              record, json.loads(json.dumps(record)))
    row = d.set_index("metric").loc["status"]
    assert row["verdict"] == verdicts.FLIPPED and row["cause_kind"] == kind
    assert ("stale" in row["cause"]) == (kind == CODE)


def test_inputs_a_smaller_grid_no_longer_reads_are_one_cause_and_long_settings_are_counted():
    """A quick run against a full one: thirty cells no longer read are one line, not thirty, and
    a grid of settings reads as its size, not as its every entry."""
    from inferlab.review.attribution import Comparison, config_changes

    cells = {f"results/sampling/cells/T{t}.parquet": f"sha{t}" for t in range(30)}
    job = {"rule": "sampling_summary", "config_sha256": "c", "code_sha256": "k"}
    old = {"files": {"results/sampling/summary.parquet": {**job, "inputs_sha256": cells}}}
    new = {"files": {"results/sampling/summary.parquet": {**job, "inputs_sha256": dict(list(cells.items())[:2])}}}
    (cause,) = Comparison(old, new).file_causes("results/sampling/summary.parquet")
    text = render(cause, with_kind=False)
    assert (cause.kind, text) == (INPUT, "results/sampling/cells/T10.parquet and 27 more removed as inputs")
    grid = [{"cell": f"T{t}", "temperature": t / 10} for t in range(26)]

    def config_texts(*settings) -> list[str]:
        return [render(Cause.changed(CONFIG, config_changes(*settings, {}, {})), with_kind=False)]

    assert config_texts({"cells": grid}, {"cells": grid[:5]}) == ["cells [26 entries] → [5 entries]"]
    assert config_texts({"seed": 1}, {"seed": 2}) == ["seed 1 → 2"]


def test_a_card_names_each_metrics_nearest_cause_and_counts_the_rest():
    cause = (Cause.changed(CONFIG, {"quantization.gptq.damp": (0.01, 0.05)}),
             Cause(INPUT, field=("results/models/ref/meta.json",), old=("a",), new=("b",),
                   via=Cause.changed(CONFIG, {"x": (1, 2)})),
             Cause.changed(MACHINE, {"cpu_model": ("CPU A", "CPU B")}, rule="quant_scheme"))
    assert diff_summary.brief_cause(cause) == "config: quantization.gptq.damp 0.01 → 0.05 (+2 more causes below)"
    long = "config: " + "; ".join(f"training.defaults.setting_{i} {i} → {i + 1}" for i in range(20))
    brief = diff_summary.brief_cause([Cause.changed(CONFIG, {f"training.defaults.setting_{i}": (i, i + 1)
                                                             for i in range(20)})])
    assert len(brief) == diff_summary.CARD_CAUSE_CHARS and brief.endswith("…")
    assert brief.startswith(long[:diff_summary.CARD_CAUSE_CHARS - 2])


def test_causes_are_one_by_their_fields_not_by_their_text():
    """Two inputs whose sha256 differ only beyond the 8 digits a reader sees render alike and stay two; the
    same cause found by two walks (another upstream object, equal in every field) is one."""
    from inferlab.review.attribution import unique

    def moved(old_sha: str) -> Cause:
        return Cause(INPUT, field=("results/corpus/train.bin",), old=(old_sha,), new=("b" * 64,))

    alike = [moved("a" * 63 + "1"), moved("a" * 63 + "2")]
    assert render(alike[0]) == render(alike[1]) and len(unique(alike)) == 2
    via = {"steps": (500, 600)}
    walks = [Cause(INPUT, field=("results/models/ref/meta.json",), old=("x",), new=("y",),
                   via=Cause.changed(CONFIG, dict(via))) for _ in range(2)]
    assert walks[0] is not walks[1] and unique(walks) == [walks[0]]
    # a setting's value may be a list: still one identity, no hashing error
    grid = Cause.changed(CONFIG, {"sampling.cells": (["T1"], ["T1", "T2"])})
    assert len(unique([grid, Cause.changed(CONFIG, {"sampling.cells": (["T1"], ["T1", "T2"])})])) == 1
