"""Puts this checkout's root first on sys.path, so job scripts import its `inferlab` package.

Snakemake runs a script from a copy under .snakemake/scripts/ but appends the script's own
directory (scripts/) to sys.path; every job script imports this module first. It replaces
PYTHONPATH, which Snakemake clears for jobs in a conda env (`--sdm conda`), and it wins over
any other installed copy of inferlab.
"""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if sys.path[:1] != [ROOT]:
    sys.path.insert(0, ROOT)
