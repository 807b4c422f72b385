"""Plumbing shared by the workflow's scripts: logging and thread setup for one job."""

from __future__ import annotations

import importlib.metadata
import logging
import os
import sys
from pathlib import Path
from typing import TextIO

from inferlab.jobs.lineage import set_job_lineage


def _set_threads(threads: int) -> None:
    # Aggregation jobs never import torch (it would take most of their time); compute jobs have imported it by now.
    torch = sys.modules.get("torch")
    if torch is None:
        # a later `import torch` reads these
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
        logging.info("torch %s (not imported), %d threads", importlib.metadata.version("torch"), threads)
        return
    torch.set_num_threads(threads)
    logging.info("torch %s, %d threads", torch.__version__, torch.get_num_threads())


def start_job(log_path: str | Path, threads: int, lineage: dict | None = None) -> TextIO:
    """Sends stderr (tqdm bars, warnings, tracebacks) and logging to the job's log file.

    `lineage` (inferlab.jobs.lineage.job_lineage) is then recorded in every table and checkpoint
    the job writes.
    """
    set_job_lineage(lineage)
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    handle = open(log_path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the job
    terminal = sys.stderr
    sys.stderr = handle

    def report_failure(kind, error, tb):
        # Full traceback in the log; the one-line reason on the terminal, where the user looks first.
        sys.__excepthook__(kind, error, tb)
        print(f"{kind.__name__}: {error}\n(full traceback in {log_path})", file=terminal, flush=True)

    sys.excepthook = report_failure
    logging.basicConfig(stream=handle, level=logging.INFO, force=True,
                        format="%(asctime)s %(levelname)s %(message)s")
    _set_threads(max(1, int(threads)))
    if lineage:
        logging.info("lineage: rule %s, code %s, config %s", lineage["rule"],
                     str(lineage["code_sha256"])[:12], lineage["config_sha256"][:12])
    return handle
