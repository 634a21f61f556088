"""A compile that takes seconds shows a progress bar when stderr is a terminal (a pseudo-terminal
here), fed by skc's progress reports; without a terminal nothing is printed."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

from conftest import MLP_SOURCE, PYTHON, must_pass

# The host compiler, slowed by a second before it starts, so the compile takes seconds.
SCRIPT = MLP_SOURCE + '''
import os, sys
import skc_torch

base = sys.argv[1]
slow = os.path.join(base, "slow_compiler")
with open(slow, "w") as f:
    f.write("#!/bin/sh\\nsleep 1.5\\nexec %s \\"$@\\"\\n" % os.path.join(os.path.dirname(skc_torch.LIBRARY), "host_op_compiler"))
os.chmod(slow, 0o755)
opt = skc_torch.compile(Mlp().eval(), {"base_dir": base, "compiler": slow})
opt(torch.randn(3, 16))
print("outcome", opt.compile_report.outcome)
'''


def write_script(tmp_path) -> str:
    path = tmp_path / "slow.py"
    path.write_text(SCRIPT)
    (tmp_path / "base").mkdir()
    return str(path)


def env() -> dict:
    return dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", TERM="xterm")


def test_a_bar_on_a_terminal(tmp_path):
    script = write_script(tmp_path)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 24 rows, 120 columns
    try:
        p = subprocess.Popen([PYTHON, script, str(tmp_path / "base")], stdout=subprocess.PIPE, stderr=slave,
                             stdin=subprocess.DEVNULL, env=env(), text=True)
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        out, _ = p.communicate(timeout=300)
    finally:
        os.close(master)
    assert p.returncode == 0, shown.decode(errors="replace")
    assert out.split() == ["outcome", "compiled"]
    text = shown.decode(errors="replace")
    # While the compiler sleeps: none of the model's 5 ops done, the bar redrawn in place.
    assert re.search(r"\rskc: compiling 0/5 ops \| +\| 00:0[0-9]\r", text), text


def test_silent_without_a_terminal(tmp_path):
    script = write_script(tmp_path)
    p = subprocess.run([PYTHON, script, str(tmp_path / "base")], capture_output=True, text=True, env=env(),
                       timeout=300)
    assert must_pass(p).split() == ["outcome", "compiled"]
    assert p.stderr == ""
