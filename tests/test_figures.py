"""A report figure is declared once, in its experiment's spec: its drawing, title, caption and category.

That one declaration must reach the report's figures (reports/figures/<stem>.png) and what Snakemake's
--report shows for the PNG: its category and its caption, workflow/report/figure.rst rendered as Snakemake
renders a caption (Jinja2 with `snakemake` in scope, the wildcards its pattern matched, then reStructuredText).
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest
from docutils.core import publish_parts
from jinja2 import Environment
from snakemake.iocontainers import Params, Wildcards

from inferlab import experiments
from inferlab.quant.spec import SPEC as QUANT
from inferlab.report import figures
from inferlab.report.assemble import build_document, drawing, make_figures, unplaced_figures
from inferlab.report.build import write_report
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.checklist import check_all
from inferlab.spec import Figure
from tests.test_report import MACHINE, _paths, full_data

REPO = Path(__file__).resolve().parent.parent
TOY = Figure("Quantization: a toy figure", "4 Quantization", caption="One *toy* mark per scheme.",
             draw="tests.test_figures:toy_figure")


TOY_DRAWN: list[int] = []  # the scheme count each toy drawing read


def toy_figure(data: ReportInputs) -> bytes:
    """The toy's drawing: it reads the report's inputs like any other, and returns a real PNG."""
    TOY_DRAWN.append(len(data.table("quant_summary")))
    buffer = io.BytesIO()
    plt.figure(figsize=(0.2, 0.2)).savefig(buffer, format="png")
    plt.close("all")
    return buffer.getvalue()


@pytest.fixture
def toy_declared(monkeypatch):
    """The toy declared in the quantization spec, then gathered as importing the specs gathers them."""
    monkeypatch.setitem(QUANT.figures, "toy_figure", TOY)
    monkeypatch.setattr(experiments, "FIGURES", experiments.gather_figures(experiments.SPECS))


@pytest.fixture(scope="module")
def blank_png() -> bytes:
    return figures.to_png(plt.figure(figsize=(0.2, 0.2)))


@pytest.fixture
def unrasterised(monkeypatch, blank_png):
    """The real figures are built but not rasterised: this module tests where figures go, not their pixels."""
    def blank(fig) -> bytes:
        plt.close(fig)
        return blank_png
    monkeypatch.setattr(figures, "to_png", blank)


def snakemake_caption(stem: str) -> str:
    """The HTML caption Snakemake's --report gives reports/figures/<stem>.png (snakemake/report/__init__.py,
    FileRecord.render): the rule's caption file as a Jinja2 template, its params and the file's wildcards."""
    template = (REPO / "workflow/report/figure.rst").read_text(encoding="utf-8")
    snakemake = SimpleNamespace(params=Params(fromdict={"figure_captions": experiments.figure_captions()}),
                                wildcards=Wildcards(fromdict={"stem": stem}))
    text = Environment(trim_blocks=True, lstrip_blocks=True).from_string(template).render(snakemake=snakemake)
    return publish_parts(text, writer="html")["body"]


def test_the_report_rule_captions_and_files_every_figure_from_the_specs():
    """What snakemake_caption assumes of the rule: one caption template, fed the specs' captions."""
    rule = (REPO / "workflow/rules/report.smk").read_text(encoding="utf-8")
    assert 'patterns=["{stem}.png"], caption="../report/figure.rst"' in rule
    assert "category=figure_category" in rule and "figure_captions=figure_captions()" in rule
    assert not list((REPO / "workflow/report").glob("fig_*.rst"))


def test_a_figure_declared_in_its_spec_reaches_the_report_and_snakemakes_report(toy_declared, unrasterised,
                                                                                 tmp_path):
    data = full_data()
    assert make_figures(data)["toy_figure"][:4] == b"\x89PNG" and TOY_DRAWN[-1] == len(data.table("quant_summary"))

    paths = _paths(tmp_path)
    write_report(data, paths, {"config_sha256": "0" * 64}, MACHINE)
    assert Path(paths.figures, "toy_figure.png").read_bytes()[:4] == b"\x89PNG"  # what --report globs
    page = Path(paths.markdown).read_text(encoding="utf-8")
    assert "![Quantization: a toy figure](figures/toy_figure.png)" in page  # no section placed it: the page does

    assert experiments.figure_category(Wildcards(fromdict={"stem": "toy_figure"})) == "4 Quantization"
    assert snakemake_caption("toy_figure") == "<p>One <em>toy</em> mark per scheme.</p>\n"


def test_every_figure_is_drawn_and_captioned(unrasterised):
    """The specs' figures come out of make_figures, the review's from the diff; each has its own caption."""
    drawn = make_figures(ReportInputs())
    assert set(drawn) == {stem for stem, figure in experiments.FIGURES.items() if figure.draw}
    assert set(experiments.FIGURES) - set(drawn) == {experiments.CHANGES_FIGURE}
    for stem, figure in experiments.FIGURES.items():
        assert figure.draw is None or callable(drawing(figure))
        assert figure.caption and figure.caption in snakemake_caption(stem).replace("\n", " ")


def test_every_real_figure_is_placed_by_its_section():
    """"Further figures" only catches a figure no section shows yet; today each has its place in its story."""
    data = full_data()
    doc = build_document(data, check_all(data, MACHINE), {})
    assert unplaced_figures(doc) == [] and ("h2", "Further figures") not in doc.blocks


def test_the_speculative_caption_names_the_roofline_line_its_figure_draws():
    assert "at the roofline" in experiments.FIGURES["speculative_yield"].caption


def test_the_specs_stay_free_of_matplotlib():
    """The Snakefile imports them at parse time; the drawings are named, and imported only when the report draws."""
    code = "import sys, inferlab.experiments; assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
