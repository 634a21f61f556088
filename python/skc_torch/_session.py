"""Recording sessions: options into the plugin's config, the process's one session, the compile
report and the counters as Python values.

The plugin has one recording session per process (docs/torch.md). This module keeps the
:class:`Recording` that holds it, so that :func:`skc_torch.compile`'s wrappers and
:func:`recording` share it by the rules of docs/torch.md ("Two models, or one model twice").
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Dict, List, Mapping, Optional, Type, TypedDict

from . import _plugin, _progress
from ._plugin import Error

#: Options as skc_torch takes them: option names of docs/options.md and of the plugin
#: (docs/torch.md, "enable(config)") to JSON values (a path may be an ``os.PathLike``).
Options = Mapping[str, Any]

_lock = threading.RLock()  # the session's changes and compiles, across threads
_active: Optional["Recording"] = None  # the session recording now, if this package started it
_sessions: Dict[int, "Recording"] = {}  # every session by its number, for the wrappers' reports
_numbers = itertools.count(1)


def script_dir() -> str:
    """The folder of the running script (``sys.argv[0]``, symbolic links resolved), or the working
    directory when there is none (the interactive interpreter, ``python -c``)."""
    main = sys.argv[0] if sys.argv else ""
    if main not in ("", "-c", "-m") and os.path.isfile(main):
        return os.path.dirname(os.path.realpath(main))
    return os.getcwd()


def config(options: Optional[Options]) -> str:
    """`options` as the plugin's config (JSON), with the base directory's default: unless the
    options give ``base_dir``, or put the outputs in the model compile cache's folder
    (``model_compile_cache`` true and ``force_eager`` not), the folder of the running script, as
    the original puts its outputs (:func:`script_dir`). The plugin checks every value."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise Error(f"skc: options must be a dict of option names to values, found {type(options).__name__}")
    doc: Dict[str, Any] = {}
    for name, value in options.items():
        if not isinstance(name, str):
            raise Error(f"skc: option names must be strings, found {name!r}")
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise Error(f"skc: option '{name}': a {type(value).__name__} is not a JSON value") from None
        doc[name] = value
    model_cache = doc.get("model_compile_cache") is True and doc.get("force_eager") is not True
    if "base_dir" not in doc and not model_cache:
        doc["base_dir"] = script_dir()
    return json.dumps(doc)


def check(config_json: str) -> bool:
    """Checks a config as ``enable`` would, without starting anything; whether it turns the
    feature on (``static_kernel_compile``, true unless given false)."""
    _plugin.call("check", config_json)
    return json.loads(config_json).get("static_kernel_compile", True) is not False


class OpCounters(TypedDict):
    """The calls of one op type since the plugin was loaded (docs/torch.md, "counters()")."""

    static: int  #: its static kernel ran
    stock: int  #: described, but no static kernel: the stock kernel ran
    recorded: int  #: distinct op instances given to recording sessions
    unsupported: int  #: calls the plugin cannot describe: the stock kernel ran
    static_ms: float  #: time in static calls (with the option ``timing``)
    stock_ms: float  #: time in stock calls of described ops (with ``timing``)


def counters() -> Dict[str, OpCounters]:
    """Calls per op type (``MatMulV2``, ``LayerNormV3``, ...) since the plugin was loaded; only the
    op types with a call appear."""
    result: Dict[str, OpCounters] = json.loads(_plugin.call("counters"))
    return result


@dataclass(frozen=True)
class CompileReport:
    """What a compile did (docs/torch.md, "compile()"; the fields of ``skc compile --json``).
    ``str(report)`` is a readable summary."""

    outcome: str  #: ``compiled``, ``hit``, ``waited``, ``downloaded``, ``disabled`` or ``skipped``
    key: str  #: the cache key in hex; empty when nothing was compiled or looked up
    package: str  #: the run package used
    installed: str  #: the package installed last; empty when nothing was installed
    cache_hit: bool  #: the package came from the cache (``hit``, ``waited``, ``downloaded``)
    counts: Dict[str, int]  #: ``recorded``, ``selected``, ``compiled``, ``reused``, ...
    stage_ms: Dict[str, float]  #: time per stage in flow order, milliseconds
    total_ms: float
    local_rank: int  #: this rank among its node's ranks (0: the leader, which compiles)
    local_world_size: int
    extracted: bool  #: this rank extracted the package: the node's one install
    not_recorded: List[str]  #: why calls seen while recording were not recorded, once each
    summary: str  #: one line, as skc logs it
    raw: Dict[str, Any] = field(repr=False)  #: the plugin's report, every field

    @classmethod
    def from_json(cls, text: str) -> "CompileReport":
        r = json.loads(text)
        return cls(outcome=r["outcome"], key=r["key"], package=r["package"], installed=r["installed"],
                   cache_hit=r["cache_hit"], counts=r["counts"], stage_ms=r["stage_ms"], total_ms=r["total_ms"],
                   local_rank=r["local_rank"], local_world_size=r["local_world_size"], extracted=r["extracted"],
                   not_recorded=r.get("not_recorded", []), summary=r["summary"], raw=r)

    def __str__(self) -> str:
        lines = [self.summary]
        if self.stage_ms:
            lines.append("stages: " + ", ".join(f"{name} {ms:.1f} ms" for name, ms in self.stage_ms.items()))
        lines += [f"not recorded: {why}" for why in self.not_recorded]
        return "\n".join(lines)


class Recording:
    """The plugin's recording session: calls of the ops it overrides are recorded until
    :meth:`compile`. Made by :func:`recording`; a context manager."""

    def __init__(self, config_json: str, progress: Optional[bool], explicit: bool) -> None:
        self.config = config_json
        self.progress = progress
        self.explicit = explicit  # made by recording(), not by a wrapper's warmup
        self.number = next(_numbers)
        self._report: Optional[CompileReport] = None
        self._error: Optional[Error] = None
        self._ended = False  # compiled, failed, or ended by disable()

    @property
    def active(self) -> bool:
        """Whether it still records (not compiled, not ended by :func:`disable`)."""
        return not self._ended

    @property
    def report(self) -> Optional[CompileReport]:
        """The report of its compile, once compiled."""
        return self._report

    def compile(self) -> CompileReport:
        """Ends the recording, compiles what it recorded (or finds the package in the cache),
        installs it and loads the static kernels: later calls of those ops run them. Called again,
        returns the same report (or raises the same error).

        A compile that takes more than half a second shows its progress on a terminal (stderr),
        unless the session was made with ``progress=False``.

        Raises:
            Error: the compile failed (the message is skc's), or :func:`disable` ended the session.
        """
        global _active
        with _lock:
            if self._report is not None:
                return self._report
            if self._error is not None:
                raise self._error
            if self._ended:
                raise Error("skc: the recording session was ended by skc_torch.disable() before its compile")
            self._ended = True
            if _active is self:
                _active = None
            try:
                self._report = CompileReport.from_json(_progress.run(self.progress))
            except Error as e:
                self._error = e
                raise
            except _progress.Interrupted as stop:  # Ctrl-C: the compile ran to its end all the same
                if stop.report is not None:
                    self._report = CompileReport.from_json(stop.report)
                elif isinstance(stop.error, Error):
                    self._error = stop.error
                raise
            return self._report

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        """Compiles, unless the block did; if the block raised, the session ends without a compile,
        as :func:`disable` ends it (stock kernels everywhere until the next compile)."""
        if kind is None:
            self.compile()
        elif self.active:
            disable()


def begin(session: Recording) -> None:
    """Starts `session` as the plugin's session. A wrapper's session that records meanwhile is
    compiled first (its wrappers' later warmup calls start another); an explicit one is an error."""
    global _active
    with _lock:
        if _active is not None and _active.active:
            if _active.explicit:
                raise Error("skc: a recording session is already active: compile it (session.compile()) or "
                            "call skc_torch.disable() first")
            _active.compile()
        _plugin.call("enable", session.config)
        _active = session
        _sessions[session.number] = session


def session_for(config_json: str, progress: Optional[bool]) -> Recording:
    """The session a wrapper's warmup call records in: the explicit one recording now, else a
    wrapper's one of the same config, else a new one (after compiling a wrapper's one of another
    config)."""
    with _lock:
        if _active is not None and _active.active and (_active.explicit or _active.config == config_json):
            return _active
        session = Recording(config_json, progress, explicit=False)
        begin(session)
        return session


def session(number: int) -> Optional[Recording]:
    """The session of that number, if this package started it."""
    return _sessions.get(number)


def recording(options: Optional[Options] = None, *, progress: Optional[bool] = None) -> Recording:
    """Starts recording now, with `options`, and returns the session.

    Every call of an op the plugin overrides, from any model or thread, is recorded (with its
    exact shapes) until ``session.compile()``, which compiles them and makes later calls run the
    static kernels. As a context manager, the end of the block compiles unless the block did::

        with skc_torch.recording({"base_dir": "/tmp/skc"}) as session:
            model(x)                       # stock kernels, recorded
        print(session.report)              # compiled (or a cache hit) and installed
        model(x)                           # static kernels

    Args:
        options: the options of docs/options.md (``static_kernel_compile``,
            ``disable_static_kernel_compile_cache``, ``op_blacklist``, ``jobs``, ...) and the
            plugin's (``compiler``, ``device``, ``toolchain_version``, ``op_library``, ``timing``,
            ``output_cache_mib``), as a dict. ``base_dir`` defaults to the folder of the running script.
        progress: show the compile's progress on stderr: None (the default) when stderr is a
            terminal, True always, False never.

    Raises:
        Error: a bad option (the message names it), or a session is already recording. A wrapper
            of :func:`skc_torch.compile` that is recording is compiled first instead.
    """
    session = Recording(config(options), progress, explicit=True)
    begin(session)
    return session


def disable() -> None:
    """Turns the plugin off: stock kernels for every call, nothing recorded or counted; the static
    kernels are unloaded and a session recording now ends without a compile. A later
    :func:`recording`, or a wrapper's warmup, starts over."""
    global _active
    with _lock:
        _plugin.call("disable")
        if _active is not None:
            _active._ended = True
            _active = None
