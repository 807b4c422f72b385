"""Code lineage: the AST import closure and its hash, the record jobs write, the report's chain check."""

from __future__ import annotations

import json
import os
import textwrap
from ast import parse as ast_parse
from pathlib import Path

import pandas as pd

from inferlab.jobs import lineage
from inferlab.jobs.lineage import code_identity, code_sha256, import_closure, job_lineage
from inferlab.jobs.tables import read_provenance, write_table
from inferlab.review.lineage_graph import CURRENT, NO_LINEAGE, STALE, lineage_table, stale_inputs


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


PACKAGE = {
    "inferlab/__init__.py": '"""The package."""\n',
    "inferlab/quant.py": '''\
        """Quantization."""
        from inferlab.model import GPT

        BITS = 8  # the default width


        def quantize(x):
            """Rounds x."""
            return round(x * BITS)
        ''',
    "inferlab/model.py": "GPT = object\n",
    "inferlab/unused.py": "X = 1\n",
    "inferlab/report/__init__.py": "",
    "inferlab/report/build.py": "from . import render\nfrom .render import page\n",
    "inferlab/report/render.py": "def page():\n    return 1\n",
    "scripts/job.py": "from inferlab.quant import quantize\nprint(quantize(1))\n",
    "scripts/report_build.py": "from inferlab.report import build\n",
}


def _package(tmp_path: Path) -> Path:
    _write(tmp_path, PACKAGE)
    return tmp_path


def test_closure_follows_from_imports_transitively_and_skips_unused_modules(tmp_path):
    root = _package(tmp_path)
    assert set(import_closure(root / "scripts/job.py", root)) == {"inferlab", "inferlab.quant", "inferlab.model"}


def test_closure_follows_from_package_import_module_and_relative_imports(tmp_path):
    root = _package(tmp_path)
    assert set(import_closure(root / "scripts/report_build.py", root)) == {
        "inferlab", "inferlab.report", "inferlab.report.build", "inferlab.report.render"}


def test_closure_sees_imports_inside_functions(tmp_path):
    root = _package(tmp_path)
    _write(root, {"scripts/lazy.py": "def main():\n    import inferlab.unused\n"})
    assert "inferlab.unused" in import_closure(root / "scripts/lazy.py", root)


def _edit(root: Path, name: str, old: str, new: str) -> None:
    path = root / name
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_docstring_comment_and_formatting_edits_keep_the_hash(tmp_path):
    root = _package(tmp_path)
    before = code_sha256(root / "scripts/job.py", root, compute=False)
    _edit(root, "inferlab/quant.py", '"""Rounds x."""', '"""Rounds x to the nearest integer step."""')
    _edit(root, "inferlab/quant.py", "# the default width", "# why eight: the seed's default")
    _edit(root, "inferlab/quant.py", "return round(x * BITS)", "return round(\n        x * BITS\n    )")
    _edit(root, "inferlab/quant.py", '"""Quantization."""', '"""Quantization, documented at length."""')
    assert code_sha256(root / "scripts/job.py", root, compute=False) == before


def test_a_semantic_edit_anywhere_in_the_closure_changes_the_hash(tmp_path):
    root = _package(tmp_path)
    before = code_sha256(root / "scripts/job.py", root, compute=False)
    _edit(root, "inferlab/model.py", "GPT = object", "GPT = object\nLAYERS = 2")
    after_model = code_sha256(root / "scripts/job.py", root, compute=False)
    assert after_model != before
    _edit(root, "inferlab/quant.py", "BITS = 8", "BITS = 4")
    assert code_sha256(root / "scripts/job.py", root, compute=False) not in (before, after_model)


def test_an_edit_outside_the_closure_keeps_the_hash(tmp_path):
    root = _package(tmp_path)
    before = code_sha256(root / "scripts/job.py", root, compute=False)
    _edit(root, "inferlab/unused.py", "X = 1", "X = 2")
    _edit(root, "inferlab/report/render.py", "return 1", "return 2")
    assert code_sha256(root / "scripts/job.py", root, compute=False) == before


def test_touch_keeps_the_hash(tmp_path):
    root = _package(tmp_path)
    before = code_sha256(root / "scripts/job.py", root, compute=False)
    for path in (root / "inferlab").rglob("*.py"):
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert code_sha256(root / "scripts/job.py", root, compute=False) == before


def _fresh_process(monkeypatch) -> None:
    """What a new Snakemake start sees: nothing parsed yet."""
    monkeypatch.setattr(lineage, "_ast_cache", {})
    monkeypatch.setattr(lineage, "_ast_cache_used", set())


def test_saved_parses_give_the_same_hashes_and_an_edit_since_is_read_again(tmp_path, monkeypatch):
    root, cache = _package(tmp_path), tmp_path / ".snakemake/inferlab/code-parses.json"
    _fresh_process(monkeypatch)
    before = code_sha256(root / "scripts/job.py", root, compute=False)
    lineage.save_parse_cache(cache)

    _fresh_process(monkeypatch)
    lineage.load_parse_cache(cache)
    parsed = []
    monkeypatch.setattr(lineage.ast, "parse", lambda text, **kw: parsed.append(kw["filename"]) or ast_parse(text, **kw))
    assert code_sha256(root / "scripts/job.py", root, compute=False) == before
    assert parsed == []  # every module came from the saved parses

    _edit(root, "inferlab/quant.py", "BITS = 8", "BITS = 4")
    os.utime(root / "inferlab/quant.py", ns=(0, (root / "inferlab/quant.py").stat().st_mtime_ns + 10**9))
    assert code_sha256(root / "scripts/job.py", root, compute=False) != before
    assert parsed == [str(root / "inferlab/quant.py")]


def test_saved_parses_from_other_parsing_code_or_a_damaged_file_are_ignored(tmp_path, monkeypatch):
    root, cache = _package(tmp_path), tmp_path / "code-parses.json"
    _fresh_process(monkeypatch)
    before = code_sha256(root / "scripts/job.py", root, compute=False)
    lineage.save_parse_cache(cache)
    saved = json.loads(cache.read_text(encoding="utf-8"))
    for entry in saved["entries"]:
        entry[3] = "0" * 64  # what another version of the parser might have hashed

    for text in (json.dumps({**saved, "parser": "another"}), "{\"parser\": ", ""):
        cache.write_text(text, encoding="utf-8")
        _fresh_process(monkeypatch)
        lineage.load_parse_cache(cache)
        assert code_sha256(root / "scripts/job.py", root, compute=False) == before


def test_compute_rules_hash_the_numeric_stack_versions(tmp_path, monkeypatch):
    root = _package(tmp_path)
    versions = code_identity(root / "scripts/job.py", root, compute=True)["versions"]
    assert set(versions) == {"python", "torch", "numpy"}
    assert "versions" not in code_identity(root / "scripts/job.py", root, compute=False)
    before = code_sha256(root / "scripts/job.py", root, compute=True)
    monkeypatch.setattr(lineage, "stack_versions", lambda: {**versions, "torch": "0.0.1"})
    assert code_sha256(root / "scripts/job.py", root, compute=True) != before


def test_the_real_workflow_scripts_resolve_their_closures():
    root = Path(__file__).resolve().parent.parent
    quant = import_closure(root / "scripts/quant_scheme.py", root)
    report = import_closure(root / "scripts/report_build.py", root)
    assert {"inferlab.quant.methods", "inferlab.core.model", "inferlab.core.checkpoint"} <= set(quant)
    assert "inferlab.report.build" in report and "inferlab.core.model" not in report


def test_jobs_record_their_lineage_in_every_table(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("data", encoding="utf-8")
    record = job_lineage("quant_scheme", {"code_sha256": "abc", "scheme": "int8"}, [str(source)])
    assert record["code_sha256"] == "abc" and record["rule"] == "quant_scheme"
    assert record["inputs_sha256"] == {str(source): lineage.file_sha256(source)}
    assert record["config_sha256"] == job_lineage("x", {"scheme": "int8", "code_sha256": "other"}, [])["config_sha256"]
    assert record["config_sha256"] != job_lineage("x", {"scheme": "int4"}, [])["config_sha256"]
    lineage.set_job_lineage(record)
    try:
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet", provenance={"machine": {"os": "x"}})
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "bare.parquet")
    finally:
        lineage.set_job_lineage(None)
    assert read_provenance(tmp_path / "t.parquet") == {"machine": {"os": "x"}, "lineage": record}
    assert read_provenance(tmp_path / "bare.parquet") == {"lineage": record}


def test_lineage_table_marks_old_code_changed_inputs_and_missing_lineage(tmp_path):
    source = tmp_path / "results/in.parquet"
    source.parent.mkdir()
    source.write_bytes(b"v1")
    record = {"rule": "quant_summary", "code_sha256": "new", "config_sha256": "c",
              "inputs_sha256": {"results/in.parquet": lineage.file_sha256(source)}}
    provenance = {
        "ok": {"lineage": record},
        "old_code": {"lineage": {**record, "code_sha256": "old"}},
        "gone_rule": {"lineage": {**record, "rule": "retired"}},
        "by_hand": {"machine": {}},
    }
    table = lineage_table(provenance, {"quant_summary": "new"}, workdir=tmp_path)
    assert list(table.columns) == ["path", "rule", "recorded_code_sha256", "current_code_sha256", "status", "reason"]
    assert dict(zip(table["path"], table["status"], strict=True)) == {
        "ok": CURRENT, "old_code": STALE, "gone_rule": STALE, "by_hand": NO_LINEAGE}
    assert stale_inputs(table, ["ok", "old_code"]) == ["old_code"]
    source.write_bytes(b"v2")  # an input replaced behind the workflow's back
    table = lineage_table({"ok": {"lineage": record}}, {"quant_summary": "new"}, workdir=tmp_path)
    assert table["status"].tolist() == [STALE] and "results/in.parquet" in table["reason"].iloc[0]



def test_a_table_made_from_a_stale_upstream_table_is_stale_however_far_up(tmp_path):
    """A summary reads no quantisation code: an upstream scheme table left from old quantisation
    code (an edit, then --touch) must still make it, and the milestone it feeds, stale."""
    def table(path: str, rule: str, inputs: list[str]) -> dict:
        record = {"rule": rule, "code_sha256": f"{rule}-v1", "config_sha256": "c",
                  "inputs_sha256": {i: lineage.file_sha256(tmp_path / i) for i in inputs}}
        try:
            lineage.set_job_lineage(record)
            write_table(pd.DataFrame({"x": [1]}), tmp_path / path)
        finally:
            lineage.set_job_lineage(None)
        return {"lineage": record}

    (tmp_path / "data").mkdir()
    (tmp_path / "data/corpus.txt").write_text("corpus", encoding="utf-8")  # no lineage: the chain ends here
    table("results/scheme.parquet", "quant_scheme", ["data/corpus.txt"])
    summary = table("results/summary.parquet", "quant_summary", ["results/scheme.parquet"])
    code = {"quant_scheme": "quant_scheme-v1", "quant_summary": "quant_summary-v1"}
    assert lineage_table({"summary": summary}, code, workdir=tmp_path)["status"].tolist() == [CURRENT]
    stale = lineage_table({"summary": summary}, {**code, "quant_scheme": "quant_scheme-v2"}, workdir=tmp_path)
    assert stale["status"].tolist() == [STALE]
    assert stale["reason"].iloc[0] == ("input results/scheme.parquet is stale: code of rule quant_scheme "
                                       "changed since this file was written")
    # without a workdir nothing upstream can be read: only the table's own code is checked
    assert lineage_table({"summary": summary}, {**code, "quant_scheme": "v2"})["status"].tolist() == [CURRENT]


def test_a_template_edit_changes_the_hash_of_the_rules_that_load_it_only(tmp_path):
    from inferlab.jobs.template_lineage import rule_code_sha256, template_hashes

    root = _package(tmp_path)
    _write(root, {"inferlab/report/templates/page.html.j2": "<p>{{ x }}</p>\n"})
    report, job = root / "scripts/report_build.py", root / "scripts/job.py"
    template = root / "inferlab/report/templates/page.html.j2"
    assert template_hashes(import_closure(report, root), root) == {
        "inferlab/report/templates/page.html.j2": lineage.file_sha256(template)}
    # a rule without templates keeps exactly lineage's hash: adding template hashing reran nothing else
    assert rule_code_sha256(job, root, compute=False) == code_sha256(job, root, compute=False)
    before, job_before = rule_code_sha256(report, root, compute=False), rule_code_sha256(job, root, compute=False)
    assert before != code_sha256(report, root, compute=False)
    _edit(root, "inferlab/report/templates/page.html.j2", "<p>", "<p class=x>")
    assert rule_code_sha256(report, root, compute=False) != before
    assert rule_code_sha256(job, root, compute=False) == job_before


def test_the_workflow_declares_the_template_aware_code_hash():
    rules = (Path(__file__).resolve().parent.parent / "workflow/rules/common.smk").read_text(encoding="utf-8")
    assert "rule_code_sha256(SCRIPTS_DIR" in rules
