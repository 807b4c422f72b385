"""Copy members of a published run (a bundle or a run directory) out as real files; the rule checks their sha256."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.review.reproduce import import_member, open_source

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
source = open_source(smk.params.source)
for member, destination in zip(smk.params.members, smk.output, strict=True):
    import_member(source, member, destination)
    print(f"imported {member} from {source.label} as {destination}", file=log)
