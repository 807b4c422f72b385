# The corpus: download if missing, normalise, split, and build the vocabulary.


rule download_corpus:
    output:
        config["corpus_path"],
    params:
        url=config.get("corpus_url", ""),
    log:
        "logs/corpus/download.log",
    script:
        "../../scripts/download_corpus.py"


rule prepare_corpus:
    input:
        config["corpus_path"],
    output:
        **CORPUS,
    params:
        val_fraction=config["corpus"]["val_fraction"],
        vocab_size=config["corpus"]["vocab_size"],
    log:
        "logs/corpus/prepare.log",
    benchmark:
        "results/benchmarks/prepare_corpus.tsv"
    script:
        "../../scripts/prepare_corpus.py"
