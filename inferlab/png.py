"""matplotlib on its file-only backend, and the one way the lab writes a figure as PNG bytes.

Shared by the report's figures and the review's changes figure (which sits below the report and so
cannot import it). The PNGs carry no 'Software' text chunk, so no URL ends up in the files either.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
