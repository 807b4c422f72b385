"""The setup the experiments stand on (corpus, models, noise floor), and the columns every table shares."""

from __future__ import annotations

from inferlab.spec import Export, Figure, Spec, Table, theirs

SEED_PARAMS = theirs("params")
# The checkpoints' meta.json fields precomputed.json carries per model.
MODEL_FIELDS = ("params", "val_loss", "weights_sha256", "tokens_per_s", "train_seconds", "steps", "tokens_seen",
                "precision")

SPEC = Spec(
    name="models",
    tables=(
        Table("noise_floor", "noise_floor", 0, "Noise floor: reruns that differ only in seed",
              reads=("floor", "floor_source"), reads_if_present=("floor_reliable", "floor_reliability_note")),
        Table("corpus_stats", "prepare_corpus", "stats", "Corpus statistics"),
    ),
    # the models' validation losses come from their meta.json, not a table: inferlab.review.metrics.model_rows
    columns={
        # identity and setup, shared by every experiment's tables
        "engine": "engine", "engine_used": "engine used", "model": "model", "run": "run", "seed": "seed",
        "device": "device", "threads": "threads", "precision": "precision", "steps": "steps", "params": "parameters",
        "subject": "subject", "criterion": "criterion", "row": "row", "rank": "rank", "source": "source",
        "description": "description", "field": "field", "quantity": "quantity", "value": "value",
        "reps": "reruns", "n_runs": "runs", "range": "range", "std": "standard deviation", "contended": "contended",
        "experiment": "experiment", "metric": "metric", "key": "key", "noise": "noise kind", "old": "old",
        "new": "new", "verdict": "verdict", "op": "operator", "overall_choice": "overall choice",
        "difference": "difference",
        # models and the noise floor
        "noise_floor": "noise floor (nats)", "floor": "floor (nats)", "floor_fixed": "floor, fixed (nats)",
        "floor_measured": "floor, measured (nats)", "floor_reliable": "floor reliable",
        "floor_reliability_note": "floor reliability", "floor_source": "floor source", "loss": "loss (nats)",
        "val_loss": "val loss (nats)", "tokens_seen": "tokens seen", "tokens_per_s": "tokens/s",
        "weights_sha256": "weights sha256", "train_seconds": "train s", "sigmas": "σ away",
    },
    figures={"training_curves": Figure(
        "Training: loss curves of the three models", "Setup",
        caption="Training loss (lines) and sampled validation loss (dots) of each model against tokens seen.",
        draw="inferlab.report.figures:training_curves")},
    exports=(Export("precomputed", "noise_floor", "noise_floor"),),
)
