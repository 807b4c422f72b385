"""Which jobs import torch: each job is a fresh process, and `import torch` is about half of a
short job's wall time, so the aggregation jobs must not pay it. Compute jobs must have it imported
before start_job, which sets torch's thread count only when torch is already there."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMON = (ROOT / "workflow/rules/common.smk").read_text(encoding="utf-8")
COMPUTE = ast.literal_eval(re.search(r"COMPUTE_SCRIPTS = (\{.*?\})", COMMON, re.S).group(1))
# report_build stamps the machine (machine_stamp imports torch for its thread count)
SCRIPTS = sorted(p.stem for p in (ROOT / "scripts").glob("*.py") if not p.stem.startswith("_")
                 and p.stem != "report_build")

# Runs a script's top-level imports only (the rest needs the snakemake object). The first attempt
# to import torch, from any module on the way, answers True and stops the probe there: a compute
# job's probe need not pay torch's import to say that it would.
PROBE = """
import ast, sys

class TorchWanted(BaseException):  # not an ImportError, so no `try: import torch` can swallow it
    pass

class StopAtTorch:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise TorchWanted

sys.meta_path.insert(0, StopAtTorch())
sys.path[:0] = [sys.argv[2] + "/scripts", sys.argv[2]]
tree = ast.parse(open(sys.argv[1], encoding="utf-8").read())
imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
try:
    exec(compile(ast.Module(imports, []), sys.argv[1], "exec"), {"__name__": "job"})
except TorchWanted:
    print(True)
else:
    print("torch" in sys.modules)
"""


@pytest.mark.parametrize("script", SCRIPTS)
def test_only_compute_jobs_import_torch(script):
    out = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / f"scripts/{script}.py"), str(ROOT)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == str(script in COMPUTE), out.stderr


def test_start_job_without_torch_leaves_the_thread_count_to_the_environment(tmp_path):
    code = ("import os, sys; from inferlab.jobs.job_start import start_job; start_job(sys.argv[1], 3); "
            "print('torch' in sys.modules, os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])")
    log = tmp_path / "job.log"
    out = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, check=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["False", "3", "3"]
    assert "torch 2" in log.read_text(encoding="utf-8") and "3 threads" in log.read_text(encoding="utf-8")


# Runs every given script's top-level imports in one process, then names the compiler's modules loaded.
COMPILER_PROBE = """
import ast, sys
sys.path[:0] = [sys.argv[1] + "/scripts", sys.argv[1]]
for path in sys.argv[2:]:
    tree = ast.parse(open(path, encoding="utf-8").read())
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    exec(compile(ast.Module(imports, []), path, "exec"), {"__name__": "job"})
print(sorted(name for name in ("torch._dynamo", "torch._inductor") if name in sys.modules))
"""


def test_jobs_import_the_compiler_only_when_they_build_a_compiled_engine():
    """torch._dynamo and inductor take 1.5 s to import on top of torch's 1 s: an eager-only job
    (the sampling cells, an eager timing) must not pay that at its start."""
    scripts = [str(ROOT / f"scripts/{script}.py") for script in SCRIPTS if script in COMPUTE]
    out = subprocess.run([sys.executable, "-c", COMPILER_PROBE, str(ROOT), *scripts], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr
