"""Normalise, split and encode the corpus."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.corpus import prepare
from inferlab.jobs import start_job
from inferlab.tables import write_json

smk = snakemake  # noqa: F821
start_job(smk.log[0], 1)
prepared = prepare(Path(smk.input[0]).read_bytes(), smk.params.val_fraction, smk.params.vocab_size)
prepared.save(smk.output)
write_json(prepared.stats, smk.output.stats)
