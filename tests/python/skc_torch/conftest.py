"""Shared by the tests of the Python package skc_torch (python/skc_torch): a small model, a fresh
base directory, and a Python of its own for what must run in a process of its own.

meson runs these with PYTHONPATH naming the build tree's package (<builddir>/python) and
SKC_BUILD_ROOT the build directory; run them with Debian's /usr/bin/python3 (its torch).
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, Iterator, Optional

import pytest
import torch
from torch import nn

PYTHON = "/usr/bin/python3"


class Mlp(nn.Module):
    """A model that is not one of the project's: Linear, GELU, Linear, LayerNorm, a residual."""

    def __init__(self, d: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.up = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.down = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)
        self.label = "mlp"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(self.act(self.up(x))))


def make_model(seed: int = 0) -> Mlp:
    torch.manual_seed(seed)
    return Mlp().eval()


# The source of Mlp, for scripts that run in processes of their own.
MLP_SOURCE = '''
import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.up = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.down = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.down(self.act(self.up(x))))
'''


def run_python(script: str, *, cwd: str, env: Optional[Dict[str, str]] = None, timeout: float = 300,
               pythonpath: Optional[str] = None) -> subprocess.CompletedProcess:
    """Runs the file `script` with /usr/bin/python3 in `cwd`; PYTHONPATH is `pythonpath`, else this
    process's (the build tree's package)."""
    full = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if pythonpath is not None:
        full["PYTHONPATH"] = pythonpath
    full.update(env or {})
    return subprocess.run([PYTHON, script], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)


def must_pass(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return p.stdout


@pytest.fixture
def base(tmp_path) -> str:
    path = tmp_path / "base"
    path.mkdir()
    return str(path)


@pytest.fixture(autouse=True)
def plugin_off() -> Iterator[None]:
    """Each test starts and ends with the plugin off (one session per process)."""
    if "skc_torch" in sys.modules:
        sys.modules["skc_torch"].disable()
    yield
    if "skc_torch" in sys.modules:
        sys.modules["skc_torch"].disable()
