"""The engine bench (tools/bench_engine.py): its table, written with a machine stamp, is what
Experiment 1 quotes as measured outside the run, and the appendix holds it complete."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pandas as pd
import pytest

from inferlab.core.static_forward import context_bucket
from inferlab.jobs.tables import read_provenance, write_table
from inferlab.report.assemble import build_document
from inferlab.report.inputs import ReportInputError, ReportInputs, add_reference_table
from inferlab.report.milestones.checklist import check_all
from inferlab.report.sections.kvcache import engine_bench_note
from inferlab.review.numbers import fmt
from tests.test_report import full_data
from tests.test_speculative import tiny_gpt

ROOT = Path(__file__).resolve().parents[1]


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_engine", ROOT / "tools/bench_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench_file(tmp_path_factory):
    """The tool's own forward table on a tiny model (eager only: the compiled variants' timing is
    the tool's job, not a test's), written as the tool writes it."""
    table = bench_module().forward_table({"tiny": tiny_gpt(32, 0)}, ["eager"], [1, 3], context=8, reps=3)
    path = tmp_path_factory.mktemp("bench") / "engine-bench.parquet"
    provenance = {"machine": {"device_name": "Test CPU", "torch_threads": 2, "git_commit": "0123456789abcdef"},
                  "measured_at": "2026-12-02T06:00:00+00:00", "settings": {"reps": 3, "context": 8}}
    write_table(table, path, provenance=provenance)
    return path


def test_the_tool_writes_one_row_per_model_rows_and_variant(bench_file):
    table = pd.read_parquet(bench_file)
    assert table[["model", "rows", "variant"]].values.tolist() == [["tiny", 1, "eager"], ["tiny", 3, "eager"]]
    assert (table["median_ms"] >= table["min_ms"]).all() and (table["min_ms"] > 0).all()
    assert read_provenance(bench_file)["machine"]["device_name"] == "Test CPU"


def test_the_note_quotes_the_table_with_its_own_stamp(bench_file):
    table, provenance = pd.read_parquet(bench_file), read_provenance(bench_file)
    note = engine_bench_note(table, provenance)
    assert "outside this run" in note and "Test CPU (2 threads, git 0123456789," in note
    dirty = {**provenance, "machine": {**provenance["machine"], "git_dirty": True}}
    assert "git 0123456789 with uncommitted changes," in engine_bench_note(table, dirty)
    one = table.loc[table["rows"] == 1, "median_ms"].iloc[0]
    three = table.loc[table["rows"] == 3, "median_ms"].iloc[0]
    quoted = [float(x) for x in re.findall(r"eager (\d+\.?\d*)", note)]
    assert quoted and quoted[0] == float(fmt(one))  # as the report formats it (a tiny model: 0.03 ms)
    ratio = float(re.search(r"3 rows cost (\d+\.?\d*)×", note).group(1))
    assert ratio == pytest.approx(three / one, rel=0.01)


def test_the_report_quotes_it_in_experiment_1_and_holds_it_in_the_appendix(bench_file):
    data = full_data()
    add_reference_table(data, "engine_bench", str(bench_file), "tools/bench_engine.py --out x")
    doc = build_document(data, check_all(data), {"config_sha256": "x", "git_commit": "abc"})
    notes = [b[1] for b in doc.blocks if b[0] == "note" and "tools/bench_engine.py" in b[1]]
    assert len(notes) == 1
    entry = next(t for t in doc.appendix if "bench_engine" in t.title)
    pd.testing.assert_frame_equal(entry.df, pd.read_parquet(bench_file))
    without = build_document(full_data(), check_all(full_data()), {"config_sha256": "x", "git_commit": "abc"})
    assert not any(b[0] == "note" and "bench_engine" in b[1] for b in without.blocks)


def test_an_unreadable_bench_names_the_command_that_remakes_it(tmp_path):
    broken = tmp_path / "engine-bench.parquet"
    broken.write_text("not parquet")
    with pytest.raises(ReportInputError, match="remake it with tools/bench_engine.py --out"):
        add_reference_table(ReportInputs(), "engine_bench", str(broken), "tools/bench_engine.py --out x")


def test_the_bench_compares_row_counts_over_one_attention_span():
    """By default every row count starts where all of them attend over the same context bucket (from
    position 255 a step would attend over 256 slots and every longer forward over 512), and it is the
    latest such start."""
    rows, max_seq_len = [1, 2, 3, 5, 9], 512
    start = bench_module().one_bucket_context(rows, max_seq_len)
    assert {context_bucket(start + n, max_seq_len) for n in rows} == {256}
    assert len({context_bucket(start + 1 + n, max_seq_len) for n in rows}) == 2
