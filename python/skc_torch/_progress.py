"""The compile, with its progress on a terminal.

``torch.ops.skc.compile()`` runs the whole compile and returns at its end; torch releases the GIL
while an op runs. So with a progress display, the compile runs in a thread of its own and this
thread asks the plugin every 0.1 s for the compile's latest ``skc::CompileProgress``
(``torch.ops.skc.progress()``, JSON: phase, done, total, op, waiting_for, key), which a tqdm bar on
stderr shows once the compile has taken half a second. Without a terminal nothing is shown, and the
compile runs in the calling thread.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Dict, Optional

from . import _plugin

POLL_S = 0.1  #: how often the progress is asked for
DELAY_S = 0.5  #: a compile done sooner (a cache hit) shows nothing


def wanted(progress: Optional[bool]) -> bool:
    """Whether to show progress: `progress`, or when None, whether stderr is a terminal."""
    if progress is not None:
        return progress
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return False


class _Bar:
    """A tqdm bar on stderr, made at the first report shown."""

    def __init__(self) -> None:
        self.bar: Any = None

    def show(self, p: Dict[str, Any], age: float) -> None:
        """Shows the report `p` of a compile that started `age` seconds ago."""
        phase = p["phase"]
        if phase == "compiling" and p["total"] > 0:
            look = {"bar_format": "skc: compiling {n_fmt}/{total_fmt} ops |{bar}| {elapsed}{postfix}",
                    "total": p["total"], "postfix": p["op"]}  # the op after ", "
        else:
            what = {"waiting": f"waiting for {p['waiting_for']}", "lookup": "looking up the cache",
                    "installing": "installing the package"}.get(phase, phase)
            look = {"bar_format": "skc: {desc} {elapsed}", "desc": what}
        if self.bar is None:
            from tqdm import tqdm  # only when shown: importing tqdm costs time

            # (tqdm keeps to bar_format only on a terminal whose width it knows)
            self.bar = tqdm(file=sys.stderr, leave=False, dynamic_ncols=True, **look)
            self.bar.start_t -= age  # the time shown is the compile's
        else:
            for name, value in look.items():
                setattr(self.bar, name, value)
        self.bar.n = p["done"] if "total" in look else 0
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Interrupted(KeyboardInterrupt):
    """Ctrl-C while a compile showed its progress: the compile cannot stop half-way, so it was
    waited for; `report` is its report (JSON) or `error` what it raised."""

    def __init__(self, report: Optional[str], error: Optional[BaseException]) -> None:
        super().__init__()
        self.report = report
        self.error = error


def run(progress: Optional[bool]) -> str:
    """``torch.ops.skc.compile()``'s report (JSON), with its progress shown as :func:`wanted` says.
    An interrupt (Ctrl-C) stops the display, not the compile: it is waited for, and
    :class:`Interrupted` carries its outcome."""
    if not wanted(progress):
        return str(_plugin.call("compile"))
    outcome: Dict[str, Any] = {}
    done = threading.Event()  # waited on, not the thread: an interrupted Thread.join() may let it go

    def compile_in_thread() -> None:
        try:
            outcome["report"] = _plugin.call("compile")
        except BaseException as e:  # noqa: B036  (handed to the calling thread)
            outcome["error"] = e
        finally:
            done.set()

    worker = threading.Thread(target=compile_in_thread, name="skc_torch compile")
    bar = _Bar()
    start = time.monotonic()
    worker.start()
    try:
        while not done.wait(POLL_S):
            p = json.loads(_plugin.call("progress"))
            age = time.monotonic() - start
            if p is not None and age >= DELAY_S:
                bar.show(p, age)
    except KeyboardInterrupt as interrupt:
        bar.close()
        print("skc: the compile cannot stop half-way; waiting for its end", file=sys.stderr, flush=True)
        done.wait()
        worker.join()
        raise Interrupted(outcome.get("report"), outcome.get("error")) from interrupt
    finally:
        bar.close()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return str(outcome["report"])
