"""tools/slurm_rerun_picks.py: the quickest job of each rule, in waves that never force a job
whose unpicked downstream another pick of the same wave needs."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("slurm_rerun_picks", ROOT / "tools/slurm_rerun_picks.py")
picks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(picks)

# rule, job hash, seconds, outputs, inputs: corpus -> two trainings -> an experiment on each -> summary
JOBS = [
    ("corpus", 1, 2.0, ["c/text", "c/vocab"], ["/abs/corpus.txt"]),
    ("train", 2, 10.0, ["m/a"], ["c/text"]),
    ("train", 3, 5.0, ["m/b"], ["c/text"]),
    ("experiment", 4, 3.0, ["e/a"], ["m/a", "c/vocab"]),
    ("experiment", 5, 8.0, ["e/b"], ["m/b"]),
    ("summary", 6, 1.0, ["s"], ["e/a", "e/b"]),
]


def _quickest(run: Path) -> dict[str, list[str]]:
    return picks.quickest_job_outputs(run, picks.recorded_jobs(run))


def _run_dir(tmp_path: Path, jobs=JOBS) -> Path:
    metadata = tmp_path / ".snakemake/metadata"
    metadata.mkdir(parents=True)
    for rule, job_hash, seconds, outputs, inputs in jobs:
        for n, output in enumerate(outputs):
            (tmp_path / output).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / output).write_text(output)
            record = {"rule": rule, "job_hash": job_hash, "starttime": 100.0 + n * 0.001,
                      "endtime": 100.0 + seconds, "input": inputs, "incomplete": False}
            (metadata / base64.urlsafe_b64encode(output.encode()).decode()).write_text(json.dumps(record))
    return tmp_path


def test_each_rule_reruns_its_quickest_job_once(tmp_path):
    assert _quickest(_run_dir(tmp_path)) == {
        "corpus": ["c/text", "c/vocab"], "experiment": ["e/a"], "summary": ["s"], "train": ["m/b"]}


def test_a_pick_that_feeds_another_through_an_unpicked_job_waits_for_a_later_wave(tmp_path):
    """Forcing the corpus beside experiment a would retrain model a (not picked) and rerun it;
    forcing training b beside the summary would rerun experiment b. Experiment a feeds the summary
    directly, so the two share the first wave."""
    run = _run_dir(tmp_path)
    jobs = picks.recorded_jobs(run)
    assert picks.waves(jobs, picks.quickest_job_outputs(run, jobs)) == [["e/a", "s"], ["c/text", "c/vocab", "m/b"]]


def test_a_job_whose_outputs_are_gone_is_not_picked(tmp_path):
    run = _run_dir(tmp_path)
    (run / "m/b").unlink()
    assert _quickest(run)["train"] == ["m/a"]


def test_a_rule_with_no_complete_job_is_named_not_silently_skipped(tmp_path, capsys):
    """CI's snapshot once held results/ but not reports/: the report rule must say it was left out."""
    run = _run_dir(tmp_path)
    (run / "s").unlink()
    assert "summary" not in _quickest(run)
    assert "not picked: summary" in capsys.readouterr().err


def test_a_run_without_records_is_an_error_that_says_so(tmp_path, capsys):
    assert picks.main([str(tmp_path)]) == 1
    assert "no finished job is recorded" in capsys.readouterr().err
