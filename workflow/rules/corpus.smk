# The corpus: download if missing (see corpus_source in common.smk), normalise, split,
# and build the vocabulary.


rule download_corpus:
    output:
        DOWNLOADED_CORPUS,
    params:
        code_sha256=code_hash("corpus_download"),
        url=config.get("corpus_url", ""),
        configured_path=config["corpus_path"],
        sha256=config.get("corpus_sha256"),
    log:
        "logs/corpus/download.log",
    conda:
        CONDA_ENV
    script:
        "../../scripts/corpus_download.py"


rule prepare_corpus:
    input:
        corpus_source(),
    output:
        **CORPUS,
    params:
        code_sha256=code_hash("corpus_prepare"),
        val_fraction=config["corpus"]["val_fraction"],
        vocab_size=config["corpus"]["vocab_size"],
    log:
        "logs/corpus/prepare.log",
    benchmark:
        "results/benchmarks/prepare_corpus.tsv"
    conda:
        CONDA_ENV
    script:
        "../../scripts/corpus_prepare.py"
