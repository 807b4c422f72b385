"""The documentation stays true: the README's results table and docs/engines.md's benchmark tables are
what tools/readme_results.py writes from the committed references, every relative link resolves, the
README opens with its two commands and stays short, and no comment in inferlab/ names a CPU model."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import re
import shutil
import tokenize
from pathlib import Path

import pandas as pd
import pytest

from inferlab.jobs.tables import read_provenance

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("readme_results", ROOT / "tools/readme_results.py")
readme_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_results)

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINKED_PAGES = [README, ROOT / "config/README.md", *DOCS]
README_MAX_WORDS = 1500  # about five minutes of reading, the generated results table included
TWO_COMMANDS = ["./run.sh --config corpus_path=../shared/data/sanguo-yanyi.txt", "./test.sh"]
# Taken from a finished full run's report (docs/report.md says how); until it is committed the link
# may dangle, and only this one.
COMMIT_HASH = re.compile(r"\b[0-9a-f]{7,40}\b")
CPU_MODEL = re.compile(r"\b(EPYC|Xeon|Sapphire Rapids|Emerald Rapids|Granite Rapids|Cascade Lake|Ice Lake|Skylake"
                       r"|Cooper Lake|Zen ?[1-5]?|Ryzen|Threadripper|Milan|Genoa|Graviton|Neoverse|Apple M[1-9])\b")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _reference_block() -> str:
    return readme_results.block_for(readme_results.REFERENCE)


def test_readme_results_table_is_the_scripts_output_for_the_committed_reference():
    written = readme_results.current_block("results", README)
    assert written is not None, "README.md lost its results markers"
    assert written == _reference_block(), (
        "README.md's results table is not what the pinned reference gives: "
        "run .venv/bin/python tools/readme_results.py --write")


def test_engine_tables_are_the_scripts_output_for_the_committed_benchmark():
    written = readme_results.current_block("engine-bench", ROOT / "docs/engines.md")
    assert written is not None, "docs/engines.md lost its engine-bench markers"
    assert written == readme_results.engine_bench_block_for(), (
        "docs/engines.md's benchmark tables are not what reports/reference/engine-bench*.parquet give: "
        "run .venv/bin/python tools/readme_results.py --write")


def test_a_changed_reference_changes_the_table_so_a_stale_readme_fails():
    table = pd.read_parquet(readme_results.REFERENCE)
    provenance = read_provenance(readme_results.REFERENCE)
    seed = readme_results.json.loads(readme_results.SEED.read_text(encoding="utf-8"))
    wall = (table["metric"] == "wall_speedup") & (table["key"] == "c1_dim64 k=1 [compiled]")
    assert wall.sum() == 1
    moved = table.copy()
    moved.loc[wall, "value"] = 1.234
    block = readme_results.results_block(moved, provenance, seed)
    assert "1.23×" in block and block != readme_results.current_block("results", README)
    # a typed-in number is not what the script writes either
    shown = re.search(r"\| (\d+\.\d+)×(?: ‡)? \|", _reference_block()).group(1)
    hand_edited = _reference_block().replace(f"{shown}×", f"{float(shown) + 0.1:.2f}×")
    assert hand_edited != _reference_block()


def _checkout_copy(root: Path) -> Path:
    for name in ("scripts", "inferlab"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _rows(block: str) -> dict[str, str]:
    return {line.split(" | ")[0].strip("| "): line for line in block.splitlines() if line.startswith("| ")}


def test_a_real_edit_to_a_rules_module_marks_its_figures_as_newer_code_than_the_reference(tmp_path):
    table = pd.read_parquet(readme_results.REFERENCE)
    provenance, seed = read_provenance(readme_results.REFERENCE), json.loads(readme_results.SEED.read_text())
    root = _checkout_copy(tmp_path)
    before = readme_results.results_block(table, provenance, seed, root)
    methods = root / "inferlab/quant/methods.py"
    methods.write_text(methods.read_text() + "\nPROBE = len(__name__)  # new code that runs on import\n")
    block = readme_results.results_block(table, provenance, seed, root)
    assert "inferlab.quant.methods" not in before and "inferlab.quant.methods changed in " in block, block
    assert "quant_scheme" in block.split("inferlab.quant.methods changed in ", 1)[1].split(";")[0]
    rows = _rows(block)
    assert readme_results.NEWER in rows["M4"] and rows["setup"] == _rows(before)["setup"], rows


def test_a_comment_is_no_newer_code(tmp_path):
    table = pd.read_parquet(readme_results.REFERENCE)
    provenance, seed = read_provenance(readme_results.REFERENCE), json.loads(readme_results.SEED.read_text())
    root = _checkout_copy(tmp_path)
    before = readme_results.results_block(table, provenance, seed, root)
    methods = root / "inferlab/quant/methods.py"
    methods.write_text("# a comment\n" + methods.read_text())
    assert readme_results.results_block(table, provenance, seed, root) == before


def test_write_rewrites_only_the_block_between_the_markers(tmp_path):
    page = tmp_path / "README.md"
    page.write_text(f"before\n{readme_results.begin('results')}\nold\n{readme_results.end('results')}\nafter\n",
                    encoding="utf-8")
    block = _reference_block()
    assert readme_results.write_block("results", block, page)
    assert page.read_text(encoding="utf-8") == f"before\n{block}\nafter\n"
    assert not readme_results.write_block("results", block, page)  # already current


def test_the_results_table_names_no_commit_and_no_date():
    block = _reference_block()
    assert not COMMIT_HASH.search(block), COMMIT_HASH.search(block)
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", block)


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return LINK.findall(text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert page.exists()
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists() or ROOT not in path.parents and path != ROOT:
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: links that do not resolve: {broken}"


def test_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[gone](missing.md) ![pic](img/nope.png) [ok](page.md) `[code](x.md)`\n", encoding="utf-8")
    assert _links(page) == ["missing.md", "img/nope.png", "page.md"]


def test_the_readme_opens_with_its_two_commands():
    text = README.read_text(encoding="utf-8")
    first = FENCE.search(text)
    assert first, "README.md has no code block"
    lines = [line.split("#", 1)[0].strip() for line in first.group(0).splitlines()[1:-1]]
    assert [line for line in lines if line] == TWO_COMMANDS


def test_the_readme_is_short_and_names_no_commit():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert not COMMIT_HASH.search(text), COMMIT_HASH.search(text)


def test_the_readme_reads_in_five_minutes():
    words = len(README.read_text(encoding="utf-8").split())
    assert words <= README_MAX_WORDS, (
        f"README.md has {words} words, more than {README_MAX_WORDS}: move design notes to docs/ and link them")


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_docs_carry_no_commit_hashes_or_dates(page):
    text = page.read_text(encoding="utf-8")
    assert not COMMIT_HASH.search(text), COMMIT_HASH.search(text)
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def test_no_comment_in_the_package_names_a_cpu_model():
    hits = [f"{path.relative_to(ROOT)}:{line}: {CPU_MODEL.search(text).group(0)}"
            for path in sorted((ROOT / "inferlab").rglob("*.py"))
            for line, text in _comments_and_docstrings(path) if CPU_MODEL.search(text)]
    assert not hits, "comments say why, not where it was measured (docs/engines.md holds that): " + "; ".join(hits)


def test_the_cpu_model_check_can_fail(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Measured on a 2-core EPYC."""\nX = 1  # faster on the Xeon\n', encoding="utf-8")
    assert [CPU_MODEL.search(text).group(0) for _, text in _comments_and_docstrings(module)] == ["Xeon", "EPYC"]


def test_a_reference_that_records_each_rows_engine_gives_the_same_table():
    """New metrics tables carry `engine` and `base_key`, so the table is read, not parsed back from keys; the
    reference pinned before them takes the old path and must give the very same block."""
    table = pd.read_parquet(readme_results.REFERENCE)
    provenance, seed = read_provenance(readme_results.REFERENCE), json.loads(readme_results.SEED.read_text())
    assert "engine" not in table.columns  # pinned before the columns existed: the fallback is still needed
    parts = table["key"].str.extract(readme_results.ENGINE_KEY)
    recorded = table.assign(engine=parts["engine"], base_key=parts["what"].fillna(table["key"]))
    assert readme_results.results_block(recorded, provenance, seed) == readme_results.results_block(
        table, provenance, seed)
