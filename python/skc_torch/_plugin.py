"""The plugin library of this package, ``libskc_torch.so``, loaded once, and its ops
(``torch.ops.skc.*``, docs/torch.md) called with their errors turned into :class:`Error`."""
from __future__ import annotations

import os
from typing import Any

import torch

#: The plugin library this package loads: the one beside this file.
LIBRARY: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libskc_torch.so")


class Error(RuntimeError):
    """An error of skc's, with skc's own message (it starts with ``skc: ``): a bad option (the
    message names the option and the value found), a base directory that cannot be used, a compile
    that failed, a recording session in the way."""


def _registered() -> bool:
    """Whether the ``skc`` ops exist already (this package's library, or a copy of the plugin
    that the program loaded by its path: torch refuses a second library for one namespace)."""
    try:
        torch.ops.skc.enable  # noqa: B018  (the lookup is the test)
    except (AttributeError, RuntimeError):
        return False
    return True


def load() -> None:
    """Loads the plugin unless its ops exist already."""
    if not _registered():
        torch.ops.load_library(LIBRARY)


def call(op: str, *args: str) -> Any:
    """``torch.ops.skc.<op>(*args)``; a RuntimeError it raises becomes :class:`Error` with the same
    message."""
    fn = getattr(torch.ops.skc, op)
    try:
        return fn(*args)
    except RuntimeError as e:
        raise Error(str(e)) from None
