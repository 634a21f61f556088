"""skc_torch: static kernel compilation for PyTorch's CPU backend, through skc.

Importing it loads the plugin library (``libskc_torch.so``, beside this file) once; it overrides
aten's CPU kernels of the ops it knows (Linear, LayerNorm, GELU, Softmax, matmul, elementwise
arithmetic, ...; docs/torch.md). One line gives a model static kernels::

    import skc_torch
    model = skc_torch.compile(model, {"static_kernel_compile": True,
                                      "disable_static_kernel_compile_cache": False})
    model(x)    # the first call runs stock kernels and records every op, then they are compiled
    model(x)    # static kernels

or, with explicit control over what is recorded::

    with skc_torch.recording({"base_dir": "/tmp/skc"}) as session:
        model(x)
    print(session.report)

- :func:`compile`: a module that records its first calls, then compiles and installs;
- :func:`recording`: a recording session; ``session.compile()`` returns a :class:`CompileReport`;
- :func:`counters`: calls per op type (static, stock, recorded, unsupported);
- :func:`disable`: stock kernels again;
- :class:`Error`: skc's errors (a ``RuntimeError``).

The outputs (cache, run folders, op library) go to the folder of the running script unless the
options say otherwise (``base_dir``). The raw entry points (``torch.ops.skc.enable`` and the rest)
stay available as the low-level layer.
"""
from . import _plugin
from ._module import StaticKernelModule, compile
from ._plugin import LIBRARY, Error
from ._session import CompileReport, OpCounters, Options, Recording, counters, disable, recording

__all__ = ["compile", "recording", "counters", "disable", "Error", "CompileReport", "OpCounters", "Options",
           "Recording", "StaticKernelModule", "LIBRARY"]

_plugin.load()
