# The C13 inference lab. Rules live in workflow/rules/; see README.md for the DAG.

configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/corpus.smk"
# A reproduction imports a published run's checkpoints in place of training them (never both).
include: "workflow/rules/reproduce.smk" if config["reproduce"] else "workflow/rules/training.smk"
include: "workflow/rules/noise_floor.smk"
include: "workflow/rules/kvcache.smk"
include: "workflow/rules/sampling.smk"
include: "workflow/rules/speculative.smk"
include: "workflow/rules/graphs.smk"
include: "workflow/rules/quant.smk"
include: "workflow/rules/report.smk"

save_code_parses()


rule all:
    default_target: True
    input:
        rules.report.output,
