"""A compile that takes seconds shows a progress bar when stderr is a terminal (a pseudo-terminal
here), fed by skc's progress reports; without a terminal nothing is printed."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import termios
from typing import Callable, Optional, Tuple

from conftest import MLP_SOURCE, PYTHON, must_pass

# The host compiler, slowed by a second before it starts, so the compile takes seconds.
SLOW = MLP_SOURCE + '''
import os, sys
import skc_torch

base = sys.argv[1]
slow = os.path.join(base, "slow_compiler")
with open(slow, "w") as f:
    f.write("#!/bin/sh\\nsleep 1.5\\nexec %s \\"$@\\"\\n" % os.path.join(os.path.dirname(skc_torch.LIBRARY), "host_op_compiler"))
os.chmod(slow, 0o755)
'''
SCRIPT = SLOW + '''
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


def on_terminal(script: str, base: str, when: Optional[Callable[[bytes, subprocess.Popen], None]] = None
                ) -> Tuple[int, str, str]:
    """Runs `script` with its stderr on a pseudo-terminal of 24 rows and 120 columns; `when(shown,
    process)` sees what the terminal showed so far after each read. Returns the exit code, stdout and
    what the terminal showed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    try:
        p = subprocess.Popen([PYTHON, script, base], stdout=subprocess.PIPE, stderr=slave,
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
            if when is not None:
                when(shown, p)
        out, _ = p.communicate(timeout=300)
    finally:
        os.close(master)
    return p.returncode, out, shown.decode(errors="replace")


def test_a_bar_on_a_terminal(tmp_path):
    code, out, text = on_terminal(write_script(tmp_path), str(tmp_path / "base"))
    assert code == 0, text
    assert out.split() == ["outcome", "compiled"]
    # While the compiler sleeps: none of the model's 5 ops done, the bar redrawn in place.
    assert re.search(r"\rskc: compiling 0/5 ops \| +\| 00:0[0-9]\r", text), text


def test_silent_without_a_terminal(tmp_path):
    script = write_script(tmp_path)
    p = subprocess.run([PYTHON, script, str(tmp_path / "base")], capture_output=True, text=True, env=env(),
                       timeout=300)
    assert must_pass(p).split() == ["outcome", "compiled"]
    assert p.stderr == ""


# The host compiler waits until the test has sent Ctrl-C (the file `go` in the base).
INTERRUPTED = MLP_SOURCE + '''
import os, sys
import skc_torch

base = sys.argv[1]
held = os.path.join(base, "held_compiler")
with open(held, "w") as f:
    f.write("#!/bin/sh\\nwhile [ ! -e %s ]; do sleep 0.05; done\\nexec %s \\"$@\\"\\n" % (
        os.path.join(base, "go"), os.path.join(os.path.dirname(skc_torch.LIBRARY), "host_op_compiler")))
os.chmod(held, 0o755)
model, x = Mlp().eval(), torch.randn(3, 16)
session = skc_torch.recording({"base_dir": base, "compiler": held})
want = model(x)
try:
    session.compile()
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
report = session.compile()  # the compile's report, not an error
before = sum(c["static"] for c in skc_torch.counters().values())
got = model(x)
static = sum(c["static"] for c in skc_torch.counters().values()) - before
print("outcome", report.outcome, "static", static > 0, "agree", torch.allclose(got, want, rtol=1e-4, atol=1e-5))
'''


def test_ctrl_c_during_the_bar_waits_for_the_compile_and_keeps_its_report(tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    (tmp_path / "base").mkdir()
    sent = []

    def ctrl_c_once_the_bar_is_up(shown: bytes, p: subprocess.Popen) -> None:
        if not sent and b"skc: compiling" in shown:
            p.send_signal(signal.SIGINT)
            sent.append(True)
        if sent and b"waiting for its end" in shown:  # the compiler may go on
            (tmp_path / "base" / "go").touch()

    code, out, text = on_terminal(str(script), str(tmp_path / "base"), ctrl_c_once_the_bar_is_up)
    assert sent, text
    assert code == 0, text
    assert "skc: the compile cannot stop half-way; waiting for its end" in text
    assert out.splitlines() == ["interrupted", "outcome compiled static True agree True"], out + text
