"""`meson install` puts the package (its modules, the plugin library and host_op_compiler) into
Python's site-packages under the prefix; imported from there, with the build tree out of reach and
the installed folder moved elsewhere, a model that is not the project's runs static kernels, and
the compiler that runs is the installed one."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

from conftest import MLP_SOURCE, must_pass, run_python

SCRIPT = MLP_SOURCE + '''
import json, sys
import skc_torch

torch.manual_seed(0)
model = Mlp().eval()
x = torch.randn(4, 16)
stock = model(x)
opt = skc_torch.compile(model, {"base_dir": sys.argv[0] + ".base"})
opt(x)
static = opt(x)
print(json.dumps({
    "file": skc_torch.__file__,
    "library": skc_torch.LIBRARY,
    "loaded": sorted(torch.ops.loaded_libraries),
    "outcome": opt.compile_report.outcome,
    "static": sum(c["static"] for c in skc_torch.counters().values()),
    "agree": torch.allclose(static, stock, rtol=1e-4, atol=1e-5),
}))
'''


def test_install_then_import_from_the_prefix(tmp_path):
    build = os.environ["SKC_BUILD_ROOT"]
    dest = tmp_path / "dest"
    p = subprocess.run([os.environ.get("MESON", "meson"), "install", "-C", build, "--no-rebuild", "--quiet",
                        "--destdir", str(dest), "--tags", "python-runtime"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    inits = glob.glob(str(dest / "**" / "skc_torch" / "__init__.py"), recursive=True)
    assert len(inits) == 1, inits
    package = os.path.dirname(inits[0])
    # Under the prefixes whose site-packages Debian's Python searches, it is one of those.
    options = json.loads(subprocess.run([os.environ.get("MESON", "meson"), "introspect", "--buildoptions", build],
                                        capture_output=True, text=True, check=True).stdout)
    prefix = next(o["value"] for o in options if o["name"] == "prefix")
    if prefix in ("/usr/local", "/usr"):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        path = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"], env=env,
                              capture_output=True, text=True, check=True).stdout.splitlines()
        assert os.path.dirname(package)[len(str(dest)):] in path
    assert sorted(os.listdir(package)) == ["__init__.py", "_module.py", "_plugin.py", "_progress.py", "_session.py",
                                           "host_op_compiler", "libskc_torch.so", "py.typed"]
    assert os.access(os.path.join(package, "host_op_compiler"), os.X_OK)
    # The folder moved elsewhere still works: the plugin finds the compiler beside itself. The
    # compiler is wrapped to note that it ran.
    site = tmp_path / "moved" / "site-packages"
    shutil.copytree(os.path.dirname(package), site)
    shutil.rmtree(dest)
    moved = site / "skc_torch"
    os.rename(moved / "host_op_compiler", moved / "host_op_compiler.real")
    ran = tmp_path / "compiler-ran"
    (moved / "host_op_compiler").write_text(f'#!/bin/sh\necho "$0" >> {ran}\nexec "$0.real" "$@"\n')
    os.chmod(moved / "host_op_compiler", 0o755)
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "run.py").write_text(SCRIPT)
    (work / "run.py.base").mkdir()
    r = json.loads(must_pass(run_python("run.py", cwd=str(work), pythonpath=str(site))).splitlines()[-1])
    assert r["file"] == str(moved / "__init__.py")
    assert r["library"] == str(moved / "libskc_torch.so")
    assert r["loaded"] == [str(moved / "libskc_torch.so")]
    assert r["outcome"] == "compiled" and r["static"] > 0 and r["agree"]
    assert ran.read_text() == f"{moved / 'host_op_compiler'}\n"
