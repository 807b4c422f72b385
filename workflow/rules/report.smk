# The report: milestones M1-M4, the HTML/Markdown report with figures, the data exports and
# the offline sampling workbench. It reads every experiment's final tables; a table that an
# experiment does not (yet) produce shows as "missing" instead of breaking the report.

EXPERIMENT_OUTPUTS = [*FOUNDATION_OUTPUTS, *KVCACHE_OUTPUTS, *SAMPLING_OUTPUTS, *SPECULATIVE_OUTPUTS, *QUANT_OUTPUTS]

# One PNG per figure (stem -> category in Snakemake's own report); inferlab/report/figures.py
# draws exactly these, and the report job stops if the two lists differ.
REPORT_FIGURES = {
    "training_curves": "Setup",
    "kvcache_ratio": "1 KV cache",
    "sampling_heatmaps": "2 Sampling",
    "sampling_repetition": "2 Sampling",
    "speculative_yield": "3 Speculative",
    "quant_delta": "4 Quantization",
}


rule report:
    input:
        experiments=EXPERIMENT_OUTPUTS,
        metas=[checkpoint(name)["meta"] for name in MODELS],
        curves=[f"{checkpoint_dir(name)}/loss_curve.parquet" for name in MODELS],
        stats=CORPUS["stats"],
        seed_reference="config/seed-reference.json",
    output:
        milestones="results/milestones.parquet",   # its rows are the first table of c13-report.html
        html=report("reports/c13-report.html", caption="../report/c13_report.rst", category="Report"),
        markdown="reports/c13-report.md",
        inference_json="reports/c13-inference.json",
        precomputed_json="reports/precomputed.json",
        workbench=report("reports/sampling-workbench.html", caption="../report/workbench.rst", category="Report"),
        figures=[report(f"reports/figures/{stem}.png", caption=f"../report/fig_{stem}.rst", category=cat)
                 for stem, cat in REPORT_FIGURES.items()],
    params:
        code_sha256=code_hash("report"),
        models=MODELS,
        target=TARGET,
        figure_stems=list(REPORT_FIGURES),
        # the settings the milestone checks need (expected grid cells, repeat counts)
        settings={key: config[key] for key in ("kvcache", "sampling", "speculative", "quantization", "noise_floor")},
        config=config,   # hashed into the report's provenance section
        code_hashes=all_code_hashes(),   # current code_sha256 per rule: the staleness check of inputs
        benchmark_dir="results/benchmarks",
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
        "../../scripts/report.py"


REPORT_OUTPUTS = [
    "results/milestones.parquet",
    "reports/c13-report.html",
    "reports/c13-report.md",
    "reports/c13-inference.json",
    "reports/precomputed.json",
    "reports/sampling-workbench.html",
    *[f"reports/figures/{stem}.png" for stem in REPORT_FIGURES],
]
