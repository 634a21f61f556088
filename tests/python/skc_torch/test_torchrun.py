"""torchrun with 4 ranks runs a script that uses skc_torch.compile, unchanged: the node's leader
compiles once and installs once, and every rank runs static kernels. The script gives no base
directory: the ranks share the one beside it."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

from conftest import MLP_SOURCE

SCRIPT = MLP_SOURCE + '''
import json, os
import skc_torch

torch.manual_seed(0)
model = Mlp().eval()
x = torch.randn(4, 16)
stock = model(x)
opt = skc_torch.compile(model, {"static_kernel_compile": True, "disable_static_kernel_compile_cache": False})
opt(x)
static = opt(x)
r = opt.compile_report
with open(os.path.join(os.path.dirname(__file__), "rank%s.json" % os.environ["LOCAL_RANK"]), "w") as f:
    json.dump({"outcome": r.outcome, "key": r.key, "extracted": r.extracted, "local_rank": r.local_rank,
               "local_world_size": r.local_world_size, "agree": torch.allclose(static, stock, rtol=1e-4, atol=1e-5),
               "static": sum(c["static"] for c in skc_torch.counters().values())}, f)
'''


def test_four_ranks_compile_and_install_once(tmp_path):
    """(--redirects/--tee work around torchrun 1.13 failing at start under Python 3.11; 1.13 spells
    the option --nproc_per_node.)"""
    torchrun = shutil.which("torchrun") or "/usr/bin/torchrun"
    (tmp_path / "train.py").write_text(SCRIPT)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "4", "--redirects", "9:1", "--tee", "9:1",
                        str(tmp_path / "train.py")], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(4)]
    assert [r["local_rank"] for r in ranks] == [0, 1, 2, 3]
    assert {r["local_world_size"] for r in ranks} == {4}
    assert len({r["key"] for r in ranks}) == 1
    assert [r["outcome"] for r in ranks] == ["compiled"] * 4
    assert sum(r["extracted"] for r in ranks) == 1, "more than one install"
    packages = glob.glob(str(tmp_path / "static_kernel_compile_outputs" / "ts*_outputs" / "static_kernel_*.run"))
    assert len(packages) == 1, f"more than one compile: {packages}"
    assert all(r["agree"] and r["static"] > 0 for r in ranks), ranks
