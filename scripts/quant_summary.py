"""Collect the scheme rows into results/quant/summary.parquet, judge each against the noise floor and
apply the choice rule."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.stamps import carried_stamps
from inferlab.jobs.tables import read_provenance, read_table, write_table
from inferlab.quant.choice import choose_scheme, summary_table
from inferlab.training.noise_floor import floor_value

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
floor_table = read_table(smk.input.floor)
floor = floor_value(floor_table)
summary = summary_table([read_table(path) for path in smk.input.schemes], smk.params.schemes, floor)
choice = choose_scheme(summary)
provenance = carried_stamps(read_provenance(smk.input.schemes[0]), schemes=list(smk.params.schemes),
                            repeats={"quality": "one deterministic pass over the full validation split per scheme",
                                     "speed_reps": int(summary["speed_reps"].max())}, gptq=smk.params.gptq,
                            noise_floor={"value": floor, "source": str(floor_table["floor_source"].iloc[0]),
                                         "runs": len(floor_table)})
write_table(summary, smk.output.summary, provenance=provenance)
write_table(choice, smk.output.choice, provenance=provenance)
cols = ["scheme", "bits", "effective_bits_per_weight", "delta_loss", "kl_mean_nats", "top1_agreement",
        "within_noise", "speed_status", "ms_per_token", "fp32_ms_per_token"]
print(summary[cols].to_string(), "\n", choice["reason"].iloc[0], "\n", choice["measured"].iloc[0], file=log)
