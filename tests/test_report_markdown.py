"""The report's Markdown twin and its appendix files, rendered from hand-made tables (no browser)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from inferlab.report.build import write_report
from tests.test_report import MACHINE, _paths, full_data


def test_the_markdown_mirrors_the_body_and_links_every_appendix_table_as_a_complete_file(tmp_path):
    data = full_data()
    paths = _paths(tmp_path)
    write_report(data, paths, {"config_sha256": "x", "git_commit": "abc", "git_dirty": False}, MACHINE)
    md = Path(paths.markdown).read_text(encoding="utf-8")
    body, appendix = md.split("## Appendix: full tables", 1)
    for i in range(1, 5):
        section = body.split(f"## Experiment {i}:", 1)[1].split("\n## ", 1)[0]
        assert "**Question.**" in section and "**Prediction" in section and "### What to read from it" in section
        assert section.count("![") == 1 and "### Verdict" in section, i
    links = re.findall(r"\[all (\d+) rows?\]\((appendix/[a-z0-9-]+\.csv)\)", body)
    assert len(links) >= 5
    listed = re.findall(r"\]\((appendix/[a-z0-9-]+\.csv)\) \(all (\d+) rows?\)", appendix)
    for link, n in [*((link, n) for n, link in links), *listed]:
        assert len(pd.read_csv(Path(paths.markdown).parent / link)) == int(n), link
    for key, df in data.tables.items():  # every table the report read, complete
        if df is not None:
            assert len(pd.read_csv(Path(paths.markdown).parent / f"appendix/input-{key.replace('_', '-')}.csv")) \
                == len(df), key
