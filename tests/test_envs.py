"""The software routes: the conda env file, the job scripts' import of this checkout, the default profile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def _requirements() -> list[str]:
    lines = (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
    pins = (line.split("#", 1)[0].strip() for line in lines)
    return [pin for pin in pins if pin]


def test_conda_env_is_self_contained_with_the_requirements_pins():
    env = yaml.safe_load((REPO / "workflow/envs/inferlab.yaml").read_text(encoding="utf-8"))
    pip = next(dep["pip"] for dep in env["dependencies"] if isinstance(dep, dict) and "pip" in dep)
    relative = [line for line in pip if line.startswith(("-r", "-e", "--requirement", "--editable"))]
    assert not relative, f"Snakemake builds the env from a copy; relative entries break it: {relative}"
    assert pip == _requirements()


def test_job_scripts_import_this_checkout_without_pythonpath(tmp_path):
    """As in a conda job: no PYTHONPATH, cwd elsewhere, only scripts/ appended to sys.path."""
    code = (f"import sys; sys.path.append({str(REPO / 'scripts')!r}); import _checkout; import inferlab; "
            "print(inferlab.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True)
    assert Path(out.stdout.strip()).resolve() == REPO / "inferlab" / "__init__.py"
    for script in sorted((REPO / "scripts").glob("*.py")):
        text = script.read_text(encoding="utf-8")
        if script.name != "_checkout.py" and "inferlab" in text:
            assert "import _checkout" in text.split("inferlab", 1)[0], f"{script.name} imports inferlab first"


def test_plain_snakemake_from_the_root_uses_the_default_profile(tmp_path):
    out = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "-n", "--cores", "1", "--configfile",
                          "config/quick.yaml", "--config", f"corpus_path={tmp_path / 'absent.txt'}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "workflow specific profile profiles/default" in out.stdout + out.stderr
