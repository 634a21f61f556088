"""skc_torch.compile and skc_torch.recording in one process: the wrapper behaves as the model
(outputs, parameters, state_dict, train/eval, hooks, attributes), its warmup records and its last
warmup call compiles, shapes, sessions shared by wrappers, and every bad input's exact error."""
from __future__ import annotations

import copy
import os
import re

import pytest
import torch
from torch import nn

import skc_torch
from conftest import make_model


def static_calls() -> int:
    return sum(c["static"] for c in skc_torch.counters().values())


def test_outputs_equal_stock_then_static_kernels(base):
    model = make_model()
    x = torch.randn(4, 16)
    stock = model(x)
    opt = skc_torch.compile(model, {"base_dir": base}, progress=False)
    assert isinstance(opt, skc_torch.StaticKernelModule)
    assert opt.compile_report is None
    # The warmup call runs stock kernels (bit for bit) while recording, then compiles.
    assert torch.equal(opt(x), stock)
    report = opt.compile_report
    assert report is not None and report.outcome == "compiled"
    assert report.counts["compiled"] == report.counts["selected"] > 0
    assert report.local_world_size == 1 and report.installed
    assert str(report).startswith("static kernel compile: miss, compiled, key " + report.key)
    assert "\nstages: layout " in str(report)
    before = static_calls()
    assert torch.allclose(opt(x), stock, rtol=1e-4, atol=1e-5)
    used = {op: c for op, c in skc_torch.counters().items() if c["recorded"] > 0}
    assert {"MatMulV2", "Gelu", "LayerNormV3"} <= set(used)
    assert static_calls() > before
    # The kernels serve the process: the unwrapped model runs them too.
    before = static_calls()
    assert torch.allclose(model(x), stock, rtol=1e-4, atol=1e-5)
    assert static_calls() > before


def test_a_second_process_hits_the_cache_and_disable_turns_it_off(base):
    model = make_model()
    x = torch.randn(4, 16)
    first = skc_torch.compile(model, {"base_dir": base}, progress=False)
    first(x)
    assert first.compile_report.outcome == "compiled"
    skc_torch.disable()  # unloads the kernels: the same ops compile again, from the cache
    before = static_calls()
    assert torch.equal(model(x), make_model()(x))
    assert static_calls() == before
    again = skc_torch.compile(model, {"base_dir": base}, progress=False)
    again(x)
    assert again.compile_report.outcome == "hit"
    assert again.compile_report.key == first.compile_report.key


def test_module_behaviour_as_the_model(base):
    model = make_model()
    opt = skc_torch.compile(model, {"base_dir": base}, warmup=1000, progress=False)  # no compile here
    # parameters and state_dict: the same tensors, the model's keys
    assert [p is q for p, q in zip(opt.parameters(), model.parameters())] == [True] * 6
    assert list(opt.state_dict()) == list(model.state_dict())
    assert all(torch.equal(opt.state_dict()[k], v) for k, v in model.state_dict().items())
    # load_state_dict into the wrapper loads the model, and back
    other = make_model(seed=1)
    opt.load_state_dict(other.state_dict())
    assert torch.equal(model.up.weight, other.up.weight)
    other.load_state_dict(opt.state_dict())
    # nested in another module, the keys are those of the unwrapped model there
    parent, plain = nn.Sequential(nn.BatchNorm1d(16), opt), nn.Sequential(nn.BatchNorm1d(16), make_model())
    assert list(parent.state_dict()) == list(plain.state_dict())
    assert parent.state_dict()._metadata.keys() == plain.state_dict()._metadata.keys()
    plain.load_state_dict(parent.state_dict())
    parent.load_state_dict(plain.state_dict())
    # train() / eval() reach the model; attributes read through
    assert opt.train() is opt and model.training and model.up.training
    assert opt.eval() is opt and not model.training and not model.norm.training
    assert opt.label == "mlp" and opt.up is model.up
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        opt.nonexistent  # noqa: B018
    # hooks of the model and of the wrapper both run
    seen = []
    model.register_forward_hook(lambda m, i, o: seen.append("model"))
    opt.register_forward_pre_hook(lambda m, i: seen.append("wrapper"))
    opt(torch.randn(2, 16))
    assert seen == ["wrapper", "model"]
    # a deep copy is a wrapper of a copy
    twin = copy.deepcopy(opt)
    assert isinstance(twin, skc_torch.StaticKernelModule) and twin._orig_mod is not model
    assert list(twin.state_dict()) == list(model.state_dict())


def test_warmup_records_each_shape_and_a_later_shape_runs_stock(base):
    model = make_model()
    a, b, c = torch.randn(4, 16), torch.randn(6, 16), torch.randn(3, 16)
    opt = skc_torch.compile(model, {"base_dir": base}, warmup=2, progress=False)
    opt(a)
    assert opt.compile_report is None  # one warmup call left
    opt(b)
    assert opt.compile_report.outcome == "compiled"
    before = static_calls()
    assert torch.allclose(opt(a), model(a), rtol=1e-4, atol=1e-5)
    assert torch.allclose(opt(b), model(b), rtol=1e-4, atol=1e-5)
    assert static_calls() > before
    before = skc_torch.counters()
    assert torch.equal(opt(c), make_model()(c))  # not recorded: stock, bit for bit
    after = skc_torch.counters()
    assert sum(after[k]["static"] - before[k]["static"] for k in after) == 0
    assert sum(after[k]["stock"] - before[k]["stock"] for k in after) > 0


def test_static_kernel_compile_false_gives_the_model_back(base):
    model = make_model()
    assert skc_torch.compile(model, {"static_kernel_compile": False, "base_dir": base}) is model
    opt = skc_torch.compile(model, {"base_dir": base})
    assert skc_torch.compile(opt, {"static_kernel_compile": False}) is opt


def test_wrapping_twice_wraps_the_model_once(base):
    model = make_model()
    once = skc_torch.compile(model, {"base_dir": base}, progress=False)
    twice = skc_torch.compile(once, {"base_dir": base}, progress=False)
    assert twice is not once and twice._orig_mod is model and once._orig_mod is model


def test_two_models_record_into_one_session(base):
    torch.manual_seed(0)
    m1, m2 = make_model(), nn.Sequential(nn.Linear(16, 24), nn.ReLU()).eval()
    x = torch.randn(5, 16)
    w1 = skc_torch.compile(m1, {"base_dir": base}, warmup=2, progress=False)
    w2 = skc_torch.compile(m2, {"base_dir": base}, warmup=1, progress=False)
    w1(x)
    w2(x)  # ends w2's warmup: compiles what both recorded
    report = w2.compile_report
    assert report.outcome == "compiled" and w1.compile_report is report
    assert report.counts["recorded"] == 7  # m1: 2 MatMulV2, Gelu, Add, LayerNormV3; m2: MatMulV2, Relu
    before = static_calls()
    m1(x)
    m2(x)
    assert static_calls() - before == 7
    w1(x)  # w1's second warmup call: a session of its own, whose ops are compiled already
    assert w1.compile_report is not report and w1.compile_report.counts["already_compiled"] == 5


def test_wrappers_inside_an_explicit_session_leave_the_compile_to_it(base):
    model = make_model()
    x = torch.randn(4, 16)
    opt = skc_torch.compile(model, {"base_dir": base}, progress=False)
    with skc_torch.recording({"base_dir": base}, progress=False) as session:
        opt(x)
        assert opt.compile_report is None and session.active
    assert session.report.outcome == "compiled" and opt.compile_report is session.report
    assert session.compile() is session.report
    before = static_calls()
    opt(x)
    assert static_calls() > before


def test_recording_errors(base):
    x = torch.randn(4, 16)
    session = skc_torch.recording({"base_dir": base})
    with pytest.raises(skc_torch.Error) as e:
        skc_torch.recording({"base_dir": base})
    assert str(e.value) == ("skc: a recording session is already active: compile it (session.compile()) or call "
                            "skc_torch.disable() first")
    make_model()(x)
    skc_torch.disable()
    assert not session.active
    with pytest.raises(skc_torch.Error) as e:
        session.compile()
    assert str(e.value) == "skc: the recording session was ended by skc_torch.disable() before its compile"
    # A block that raises ends its session without a compile.
    with pytest.raises(KeyError):
        with skc_torch.recording({"base_dir": base}) as session:
            make_model()(x)
            raise KeyError("model failed")
    assert not session.active and session.report is None
    # A failed compile is skc's error, raised again by a second compile().
    failing = os.path.join(base, "fails")
    with open(failing, "w") as f:
        f.write("#!/bin/sh\necho 'no kernels today' >&2\nexit 3\n")
    os.chmod(failing, 0o755)
    session = skc_torch.recording({"base_dir": base, "compiler": failing, "disable_static_kernel_compile_cache": True})
    make_model()(x)
    with pytest.raises(skc_torch.Error) as e:
        session.compile()
    assert re.fullmatch(f"skc: {re.escape(base)}/static_kernel_compile_outputs/ts[0-9]+_pid[0-9]+_outputs/"
                        "op_compiler.log: the compiler exited with status 3. Last lines of its log:\nno kernels today",
                        str(e.value)), str(e.value)
    with pytest.raises(skc_torch.Error) as again:
        session.compile()
    assert again.value is e.value


def test_a_failed_compile_raises_from_the_last_warmup_call_then_stock(base):
    failing = os.path.join(base, "fails")
    with open(failing, "w") as f:
        f.write("#!/bin/sh\nexit 3\n")
    os.chmod(failing, 0o755)
    model = make_model()
    x = torch.randn(4, 16)
    opt = skc_torch.compile(model, {"base_dir": base, "compiler": failing}, progress=False)
    with pytest.raises(skc_torch.Error) as e:
        opt(x)
    assert re.fullmatch(f"skc: {re.escape(base)}/static_kernel_compile_outputs/ts[0-9]+_pid[0-9]+_outputs/"
                        "op_compiler.log: the compiler exited with status 3 \\(its log is empty\\)", str(e.value))
    assert opt.compile_report is None
    before = static_calls()
    assert torch.equal(opt(x), make_model()(x))
    assert static_calls() == before


def test_counters_are_python_values(base):
    before = skc_torch.counters().get("LayerNormV3", {"recorded": 0})
    with skc_torch.recording({"base_dir": base, "timing": True}, progress=False):
        make_model()(torch.randn(7, 16))
    c = skc_torch.counters()["LayerNormV3"]
    assert set(c) == {"static", "stock", "recorded", "unsupported", "static_ms", "stock_ms"}
    assert c["recorded"] - before["recorded"] == 1 and isinstance(c["stock_ms"], float)


KNOWN = ("static_kernel_compile, disable_static_kernel_compile_cache, model_compile_cache, model_compile_cache_dir, "
         "force_eager, base_dir, op_blacklist, compile_timeout_seconds, jobs, log_level, deterministic, "
         "compiler_options, super_kernel, compiler_check, cache_dir, cache_mode, remote_cache, remote_cache_read_only, "
         "compiler, device, toolchain_version, op_library, timing, output_cache_mib")


@pytest.mark.parametrize("options, message", [
    ({"op_blacklst": ["Gelu"]}, f"skc: option 'op_blacklst': unknown option; known options are: {KNOWN}"),
    ({"static_kernel_compile": "yes"}, "skc: option 'static_kernel_compile': expected true or false, found string \"yes\""),
    ({"disable_static_kernel_compile_cache": 1},
     "skc: option 'disable_static_kernel_compile_cache': expected true or false, found integer 1"),
    ({"jobs": 0}, "skc: option 'jobs': expected an integer from 1 to 1024, found 0"),
    ({"op_blacklist": ["Gelu", 7]}, "skc: option 'op_blacklist': element 1: expected a string, found integer 7"),
    ({"model_compile_cache": True}, "skc: option 'model_compile_cache_dir': required when model_compile_cache is true"),
    ({"device": ""}, "skc: option 'device': must not be empty"),
    ({"compiler": "/nonexistent/op_compiler"}, "skc: option 'compiler': \"/nonexistent/op_compiler\" does not exist"),
    ({"base_dir": "/proc/1"}, "skc: /proc/1: option 'base_dir': not writable by this user (write permission missing)"),
    ({"jobs": object()}, "skc: option 'jobs': a object is not a JSON value"),
    ({1: True}, "skc: option names must be strings, found 1"),
    (["base_dir"], "skc: options must be a dict of option names to values, found list"),
])
def test_bad_options_are_errors_naming_the_field(base, options, message):
    model = make_model()
    with pytest.raises(skc_torch.Error) as compile_error:
        skc_torch.compile(model, options)
    assert str(compile_error.value) == message
    assert isinstance(compile_error.value, RuntimeError)
    with pytest.raises(skc_torch.Error) as recording_error:
        skc_torch.recording(options)
    assert str(recording_error.value) == message


def test_a_base_that_is_a_file(base):
    path = os.path.join(base, "file")
    open(path, "w").close()
    with pytest.raises(skc_torch.Error) as e:
        skc_torch.compile(make_model(), {"base_dir": path})
    assert str(e.value) == f"skc: {path}: option 'base_dir': not a directory"


def test_a_path_object_is_a_path(base, tmp_path):
    x = torch.randn(2, 16)
    opt = skc_torch.compile(make_model(), {"base_dir": tmp_path / "base"}, progress=False)
    opt(x)
    assert opt.compile_report.outcome == "compiled"
    assert opt.compile_report.package.startswith(base)


@pytest.mark.parametrize("model, warmup, kind, message", [
    (lambda: None, 1, TypeError, "skc_torch.compile takes a torch.nn.Module, found function"),
    (None, 0, ValueError, "warmup must be an integer of at least 1, found 0"),
    (None, -2, ValueError, "warmup must be an integer of at least 1, found -2"),
    (None, 1.5, TypeError, "warmup must be an integer of at least 1, found float"),
    (None, True, TypeError, "warmup must be an integer of at least 1, found bool"),
])
def test_bad_arguments(base, model, warmup, kind, message):
    with pytest.raises(kind) as e:
        skc_torch.compile(model if model is not None else make_model(), {"base_dir": base}, warmup=warmup)
    assert str(e.value) == message


def test_help_shows_the_arguments():
    doc = skc_torch.compile.__doc__
    assert "warmup" in doc and "static_kernel_compile" in doc and "Raises:" in doc
    assert skc_torch.compile.__annotations__["warmup"] == "int"
