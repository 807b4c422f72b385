# The C13 inference lab. Rules live in workflow/rules/; see README.md for the DAG.

configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/corpus.smk"
include: "workflow/rules/train.smk"


rule all:
    default_target: True
    input:
        FOUNDATION_OUTPUTS,
