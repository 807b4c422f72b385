"""The report rule: milestones, HTML/Markdown report, data exports and the sampling workbench."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import CHECKOUT, job_lineage
from inferlab.jobs.machine import machine_stamp
from inferlab.report.build import ReportPaths, run_information, write_report
from inferlab.report.inputs import add_reference_table, load_inputs
from inferlab.review.lineage_graph import causes_record
from inferlab.review.metrics import probe_calibration
from inferlab.review.recording import ReviewPaths

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
out = smk.output
tables = {key: str(getattr(smk.input, key)) for key in smk.params.producers}  # {key: path}
metas = dict(zip(smk.params.models, smk.input.metas, strict=True))
curves = dict(zip(smk.params.models, smk.input.curves, strict=True))
data = load_inputs(tables, smk.params.producers, metas, curves, smk.input.seed_reference, smk.params.settings,
                   smk.params.target)
for key in smk.params.reference_tables:
    add_reference_table(data, key, smk.input[key], smk.params.reference_command)
machine = machine_stamp("cpu")
run = run_information(smk.params.config, smk.params.benchmark_dir,
                      [*tables.values(), *smk.input.metas, *smk.input.curves], machine)
paths = ReportPaths(
    milestones=out.milestones,
    html=out.html,
    markdown=out.markdown,
    inference_json=out.inference_json,
    precomputed_json=out.precomputed_json,
    workbench=out.workbench,
    figures=out.figures,
    appendix=out.appendix,
    review=ReviewPaths(metrics=out.metrics, bundle=out.bundle, history=smk.params.history,
                       reference=smk.params.reference, checkpoints=dict(smk.params.checkpoints),
                       published=smk.params.published and {**smk.params.published,
                                                           "metrics": smk.input.published_metrics}),
)
code_hashes = {**smk.params.code_hashes, "report": smk.params.code_sha256}  # current code per rule: staleness
sources = {**tables, **{f"models/{name}": path for name, path in metas.items()}}
causes = causes_record(sources, smk.params.code_scripts, CHECKOUT, smk.params.config, machine,
                       probe_calibration(data.table("roofline_probe")))
for m in write_report(data, paths, run, machine, code_hashes=code_hashes, causes=causes):
    print(f"{m.id}: {m.status}: {m.verdict}", file=log)
# the last line, in the log and on the terminal: what an author publishes beside the bundle
published = f"bundle {out.bundle} sha256 {open(out.bundle_sha256).read().split()[0]}"
print(published, file=log)
print(published)
