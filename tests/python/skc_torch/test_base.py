"""The base directory's default: the folder of the running script, not the working directory;
the working directory without a script (python -c); the model compile cache's folder when
model_compile_cache is on and force_eager off; base_dir when given."""
from __future__ import annotations

import os
import subprocess

from conftest import MLP_SOURCE, PYTHON, must_pass, run_python

OUTPUTS = "static_kernel_compile_outputs"

SCRIPT = MLP_SOURCE + '''
import sys
import skc_torch

options = {"model_compile_cache": True, "model_compile_cache_dir": sys.argv[1]} if len(sys.argv) > 1 else {}
if len(sys.argv) > 2:
    options["force_eager"] = True
opt = skc_torch.compile(Mlp().eval(), options)
opt(torch.randn(2, 16))
print(opt.compile_report.outcome)
'''


def test_outputs_go_beside_the_script(tmp_path):
    scripts, cwd, cache = tmp_path / "scripts", tmp_path / "cwd", tmp_path / "model-cache"
    for d in (scripts, cwd, cache):
        d.mkdir()
    (scripts / "train.py").write_text(SCRIPT)
    assert must_pass(run_python(str(scripts / "train.py"), cwd=str(cwd))).split() == ["compiled"]
    assert os.listdir(scripts / OUTPUTS) and os.listdir(cwd) == []
    # model_compile_cache on: its folder; with force_eager: beside the script again (a cache hit)
    assert must_pass(subprocess.run([PYTHON, str(scripts / "train.py"), str(cache)], cwd=str(cwd), capture_output=True,
                                    text=True)).split() == ["compiled"]
    assert os.listdir(cache / OUTPUTS) and os.listdir(cwd) == []
    assert must_pass(subprocess.run([PYTHON, str(scripts / "train.py"), str(cache), "eager"], cwd=str(cwd),
                                    capture_output=True, text=True)).split() == ["hit"]
    assert os.listdir(cwd) == []


def test_without_a_script_the_working_directory(tmp_path):
    code = SCRIPT.replace("len(sys.argv) > 1", "False").replace("len(sys.argv) > 2", "False")
    p = subprocess.run([PYTHON, "-c", code], cwd=str(tmp_path), capture_output=True, text=True)
    assert must_pass(p).split() == ["compiled"]
    assert os.listdir(tmp_path / OUTPUTS)
