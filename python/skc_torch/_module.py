"""skc_torch.compile: a model that records its first calls, then compiles and runs static kernels."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from torch import nn

from . import _session
from ._session import CompileReport, Options

_CHILD = "_orig_mod"  # the wrapped model's name, as torch.compile's wrapper calls it


class _Warmup:
    """A wrapper's own state: plain values only, so that the wrapper deep-copies and pickles."""

    def __init__(self, config_json: str, warmup: int, progress: Optional[bool]) -> None:
        self.config = config_json
        self.remaining = warmup  # calls left to record
        self.progress = progress
        self.session = 0  # the number of the session its last warmup call recorded in


class StaticKernelModule(nn.Module):
    """The module :func:`compile` returns: it behaves as the model it wraps, which is its child
    ``_orig_mod`` (as torch.compile names it). Its calls are the model's calls, with the same
    outputs, parameters (the same tensors), ``state_dict`` (the model's keys, without a prefix),
    ``train()``/``eval()``, hooks, and attributes (read through to the model). Its first `warmup`
    calls run stock kernels and are recorded; the last of them compiles; later calls run the
    static kernels."""

    def __init__(self, model: nn.Module, config_json: str, warmup: int, progress: Optional[bool]) -> None:
        super().__init__()
        self._orig_mod = model
        self._skc = _Warmup(config_json, warmup, progress)
        self._register_state_dict_hook(_without_prefix)
        self._register_load_state_dict_pre_hook(_with_prefix)

    @property
    def compile_report(self) -> Optional[CompileReport]:
        """The report of the compile that covered this wrapper's warmup calls, once it ran (that
        compile may be another wrapper's or an explicit session's, docs/torch.md)."""
        session = _session.session(self._skc.session)
        return session.report if session is not None else None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        w = self._skc
        if w.remaining <= 0:
            return self._orig_mod(*args, **kwargs)
        with _session._lock:
            w.session = _session.session_for(w.config, w.progress).number
        out = self._orig_mod(*args, **kwargs)
        with _session._lock:
            w.remaining -= 1
            if w.remaining == 0:
                session = _session.session(w.session)
                # An explicit session is the user's to compile; one already compiled covered these calls.
                if session is not None and session.active and not session.explicit:
                    session.compile()
        return out

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == _CHILD:
                raise
            return getattr(self._orig_mod, name)


def _without_prefix(module: nn.Module, state: Dict[str, Any], prefix: str, local_metadata: Dict[str, Any]) -> None:
    """The wrapper's state_dict is the model's: its keys and version metadata lose ``_orig_mod.``."""
    child = prefix + _CHILD
    for key in [k for k in state if k.startswith(child + ".")]:
        state[prefix + key[len(child) + 1:]] = state.pop(key)
    metadata = getattr(state, "_metadata", None)
    if metadata is not None:  # module paths: the model's is the wrapper's own
        for key in [k for k in metadata if k == child or k.startswith(child + ".")]:
            metadata[prefix[:-1] if key == child else prefix + key[len(child) + 1:]] = metadata.pop(key)


def _with_prefix(state: Dict[str, Any], prefix: str, local_metadata: Dict[str, Any], strict: bool,
                 missing: List[str], unexpected: List[str], errors: List[str]) -> None:
    """Loading into the wrapper loads into the model: keys (and, at the top, the version metadata;
    torch hands a nested module no metadata) get ``_orig_mod.``."""
    child = prefix + _CHILD
    for key in [k for k in state if k.startswith(prefix) and not k.startswith(child + ".")]:
        state[child + "." + key[len(prefix):]] = state.pop(key)
    metadata = getattr(state, "_metadata", None)
    if metadata is not None:
        own = prefix[:-1]
        for key in [k for k in metadata if (k == own or k.startswith(prefix)) and k != child
                    and not k.startswith(child + ".")]:
            metadata[child if key == own else child + "." + key[len(prefix):]] = metadata[key]


def compile(model: nn.Module, options: Optional[Options] = None, *, warmup: int = 1,
            progress: Optional[bool] = None) -> nn.Module:
    """Static kernels for `model`: returns a module that behaves as `model` (same outputs,
    parameters, state_dict, train()/eval(), hooks). Its first `warmup` calls run the stock kernels
    and record every op with its exact shapes; the last of them compiles the recorded ops (or finds
    them in the cache), installs the package and loads the kernels; every later call runs the
    static kernels (a shape first seen later runs stock). The report is ``.compile_report``.

    The static kernels serve every call of the process (the plugin overrides aten's kernels), not
    only this module's; two wrappers with the same options record into one session, and the
    first to end its warmup compiles for both (docs/torch.md, "Two models, or one model twice").

    Example::

        import skc_torch
        model = skc_torch.compile(model, {"static_kernel_compile": True,
                                          "disable_static_kernel_compile_cache": False})
        model(x)    # stock, recorded; then compiled and installed
        model(x)    # static kernels

    Args:
        model: the model (a ``torch.nn.Module``). A module this function returned is unwrapped
            first: wrapping it again gives a second wrapper of the same model, with its own warmup.
        options: the options of docs/options.md by their names (``static_kernel_compile``,
            ``disable_static_kernel_compile_cache``, ``op_blacklist``, ``jobs``, ``base_dir``, ...)
            and the plugin's (``compiler``, ``device``, ``toolchain_version``, ``op_library``,
            ``timing``, ``output_cache_mib``). ``static_kernel_compile`` defaults to true; false
            returns `model` itself, untouched. The base directory (cache, run folders, op library)
            defaults to the folder of the running script, or to ``model_compile_cache_dir`` when
            ``model_compile_cache`` is true and ``force_eager`` is not.
        warmup: the calls to record before compiling, at least 1 (calls with other shapes, or with
            and without autograd, record their own ops).
        progress: show the compile's progress on stderr: None (the default) when stderr is a
            terminal, True always, False never.

    Raises:
        Error: a bad option, checked now (the message names it and the value); later, from the
            call that ends the warmup, a failed compile (later calls then run stock).
        TypeError: `model` is not a ``torch.nn.Module``; `warmup` is not an integer.
        ValueError: `warmup` is below 1.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"skc_torch.compile takes a torch.nn.Module, found {type(model).__name__}")
    if isinstance(warmup, bool) or not isinstance(warmup, int):
        raise TypeError(f"warmup must be an integer of at least 1, found {type(warmup).__name__}")
    if warmup < 1:
        raise ValueError(f"warmup must be an integer of at least 1, found {warmup}")
    config_json = _session.config(options)
    if not _session.check(config_json):
        return model
    if isinstance(model, StaticKernelModule):
        model = model._orig_mod
    return StaticKernelModule(model, config_json, warmup, progress)
