"""The default sampling setting, chosen by the rule in config, and the min-p decision."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.jobs import start_job
from inferlab.lineage import job_lineage
from inferlab.repetition import choose_default
from inferlab.stamps import carried_stamps
from inferlab.tables import read_provenance, read_table, write_table

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
record = choose_default(read_table(smk.input.summary), read_table(smk.input.distribution),
                        smk.params.max_in_corpus_drop)
provenance = carried_stamps(read_provenance(smk.input.summary))
write_table(pd.DataFrame([record]), smk.output[0], provenance=provenance)
for key, value in record.items():
    print(f"{key}: {value}", file=log)
