# The report: milestones M1-M4, the HTML/Markdown report with figures, the data exports and
# the offline sampling workbench. It takes every experiment's final tables by name, from the
# rules their specs name (inferlab/<experiment>/spec.py); a table the rule does not pass shows
# as "missing", and one it passes that cannot be read fails the job with the rule to rerun.

from inferlab.experiments import REFERENCE_TABLES, RULE_TABLES, figure_captions, figure_category

# Measured outside the DAG, on a quiet machine, and committed (tools/bench_engine.py writes them all):
# Experiment 1 quotes them with their own machine stamp, the appendix holds them; the report runs without.
ENGINE_BENCH_COMMAND = f".venv/bin/python tools/bench_engine.py --out {REFERENCE_TABLES['engine_bench'].output}"
REFERENCE_INPUTS = {key: table.output for key, table in REFERENCE_TABLES.items() if Path(table.output).exists()}


rule report:
    input:
        **{key: rule_output(table.rule, table.output) for key, table in RULE_TABLES.items()},
        metas=[checkpoint(name)["meta"] for name in MODELS],
        curves=[f"{checkpoint_dir(name)}/loss_curve.parquet" for name in MODELS],
        seed_reference="config/seed-reference.json",
        checkpoints=list(BUNDLED_CHECKPOINTS.values()),
        **({"published_metrics": PUBLISHED_METRICS} if REPRODUCE else {}),
        **REFERENCE_INPUTS,
    output:
        milestones="results/milestones.parquet",   # its rows are the first table of c13-report.html
        html=report("reports/c13-report.html", caption="../report/c13_report.rst", category="Report"),
        markdown="reports/c13-report.md",
        appendix=directory("reports/appendix"),   # every full table as CSV, linked from the Markdown twin
        inference_json="reports/c13-inference.json",
        precomputed_json="reports/precomputed.json",
        workbench=report("reports/sampling-workbench.html", caption="../report/workbench.rst", category="Report"),
        metrics="results/metrics.parquet",   # headline numbers with their noise: what python -m inferlab.report.changes compares
        bundle="reports/c13-bundle.zip",   # the reviewer bundle; verify with sha256sum -c MANIFEST.sha256
        bundle_sha256="reports/c13-bundle.zip.sha256",   # the bundle's own sha256, to publish beside it
        # every figure the specs declare, as <stem>.png; --report files and captions each by its stem
        figures=report(directory("reports/figures"), patterns=["{stem}.png"], caption="../report/figure.rst",
                       category=figure_category),
    params:
        code_sha256=code_hash("report_build"),
        models=MODELS,
        figure_captions=figure_captions(),   # read by ../report/figure.rst, the caption of every figure
        target=TARGET,
        producers={key: table.rule for key, table in RULE_TABLES.items()},
        reference_tables=list(REFERENCE_INPUTS),
        reference_command=ENGINE_BENCH_COMMAND,
        # the settings the milestone checks need (expected grid cells, repeat counts)
        settings={key: config[key] for key in ("kvcache", "sampling", "speculative", "quantization", "noise_floor")},
        config=config,   # hashed into the report's provenance section
        # current code_sha256 per rule: the staleness check of inputs; an imported checkpoint is current
        # against the training code its published run recorded
        code_hashes=all_code_hashes() | (IMPORTED_CODE if REPRODUCE else {}),
        checkpoints=BUNDLED_CHECKPOINTS,
        published=published_run.describe(PUBLISHED) if REPRODUCE else None,
        code_scripts=all_code_scripts(),   # per rule: the script whose modules the diff names behind a code change
        benchmark_dir="results/benchmarks",
        # the ledger is appended to, never declared: Snakemake deletes outputs before a rerun
        history="results/history",
        reference="reports/reference/metrics.parquet",   # pinned in git: python -m inferlab.report.changes --pin
    log:
        "logs/report.log",
    benchmark:
        "results/benchmarks/report.tsv"
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        CONDA_ENV
    script:
        "../../scripts/report_build.py"
