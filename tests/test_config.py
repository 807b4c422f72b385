"""The shipped configs validate; a wrong key or type fails naming the key."""

from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def _load(name):
    return yaml.safe_load((ROOT / "config" / name).read_text(encoding="utf-8"))


def _merged_quick():
    def merge(base, over):
        return {k: merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
                for k, v in {**base, **over}.items()}
    return merge(_load("config.yaml"), _load("quick.yaml"))


@pytest.mark.parametrize("config", [_load("config.yaml"), _merged_quick()], ids=["full", "quick"])
def test_shipped_configs_validate(config):
    validate(config, SCHEMA)


def test_unknown_key_is_named():
    config = _load("config.yaml")
    config["training"]["defaults"]["stepz"] = 10
    with pytest.raises(WorkflowError, match="stepz"):
        validate(config, SCHEMA)


def test_wrong_type_is_named():
    config = _load("config.yaml")
    config["kvcache"]["reps"] = "five"
    with pytest.raises(WorkflowError, match="reps"):
        validate(config, SCHEMA)
