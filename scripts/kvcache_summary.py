"""Collect the per-length timings; summarise them and fit the no-cache step time as a + b·positions, per engine."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.config import GPTConfig
from inferlab.core.engine_rows import by_engine
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.row_contention import contended_rows
from inferlab.jobs.stamps import carried_stamps
from inferlab.jobs.tables import read_json, read_provenance, read_table, write_table
from inferlab.kvcache.summary import fit_table, summarize_timings

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
meta = read_json(smk.input.meta)
timings = pd.concat([read_table(path) for path in smk.input.timings], ignore_index=True)
steps = read_table(smk.input.steps)
first = read_provenance(smk.input.timings[0])
per_length = {str(path): read_provenance(path) for path in smk.input.timings}
contended = any(p.get("contention", {}).get("contended", False) for p in per_length.values()) or \
    bool(read_provenance(smk.input.steps).get("contention", {}).get("contended", False))
provenance = carried_stamps(first, model=model_stamp(meta, smk.params.model_name), contended=contended,
                            machines_per_length={path: p["machine"] for path, p in per_length.items()},
                            contention_per_length={path: p.get("contention") for path, p in per_length.items()})
summary = by_engine(summarize_timings, timings.drop(columns="contended", errors="ignore"))
fit = by_engine(fit_table, timings.drop(columns="contended", errors="ignore"), summary,
                steps.drop(columns="contended", errors="ignore"), config=GPTConfig.from_dict(meta["model_config"]))
# each length's job flags its own rows; the fit reads every length and the step probes, so any of them
summary["contended"] = contended_rows(summary, timings, ["engine", "length"])
fit["contended"] = contended
write_table(timings, smk.output.timings, provenance=provenance)
write_table(summary, smk.output.summary, provenance=provenance)
write_table(fit, smk.output.fit, provenance={**provenance, "fit_repeats": read_provenance(smk.input.steps)["repeats"]})
print(fit.to_string(), file=log)
