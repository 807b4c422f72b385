"""Normalise, split and encode the corpus."""

from pathlib import Path

from inferlab.corpus import prepare
from inferlab.jobs import start_job
from inferlab.lineage import job_lineage
from inferlab.tables import write_json

smk = snakemake  # noqa: F821
start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
prepared = prepare(Path(smk.input[0]).read_bytes(), smk.params.val_fraction, smk.params.vocab_size)
prepared.save(smk.output)
write_json(prepared.stats, smk.output.stats)
