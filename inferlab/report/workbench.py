"""The offline sampling workbench: one HTML page, logits embedded, recomputed in the browser.

The page is templates/workbench.html.j2. Its JavaScript mirrors
`inferlab.core.sampler.truncated_distribution` / `distribution_stats` operation by operation in IEEE
doubles (JS numbers are float64): division by T, max, exp, left-to-right sum in token-id order, a
stable descending sort, the top-p walk, the min-p threshold, renormalisation and the entropy loop.
On load the page recomputes every cell of the distribution table it was given and shows whether
each one matches (kept exactly, entropy to 1e-9), so a reader can see the agreement without
running Python.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd
from markupsafe import Markup

from inferlab.report.page_html import ENV
from inferlab.sampling.spec import GRID_COLUMNS

TEMPLATE = "workbench.html.j2"


def _json_for_script(obj) -> str:
    """JSON safe inside <script>: no '</' can end the element early."""
    return json.dumps(obj, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def grid_records(distribution: pd.DataFrame | None) -> list[dict]:
    if distribution is None:
        return []
    cols = [c for c in GRID_COLUMNS if c in distribution.columns]
    records = distribution[cols].to_dict(orient="records")
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in records]


def workbench_html(
    prompt: str,
    vocab: Sequence[str],
    logits: Sequence[float],
    grid: list[dict],
    stamp_lines: Sequence[str] = (),
) -> str:
    """The page. `grid` are rows of results/sampling/distribution.parquet (or a test's own table)."""
    if len(vocab) != len(logits):
        raise ValueError(f"{len(logits)} logits for a vocabulary of {len(vocab)}")
    data = {"prompt": prompt, "vocab": list(vocab), "logits": [float(v) for v in logits], "grid": grid}
    first = grid[0] if grid else {"temperature": 1.0, "top_p": 0.9, "min_p": 0.0}
    return ENV.get_template(TEMPLATE).render(
        prompt=prompt, stamp_lines=stamp_lines, t0=repr(float(first["temperature"])),
        p0=repr(float(first["top_p"])), m0=repr(float(first["min_p"])), data=Markup(_json_for_script(data)))
