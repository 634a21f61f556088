#!/usr/bin/python3
"""The PyTorch plugin (examples/torch, libskc_torch.so) driven as a user drives it, through
torch.ops.skc.enable / compile / counters / disable, each case in processes of its own.

Needs SKC_TORCH_PLUGIN (the library) and SKC_TORCH_EXAMPLE (examples/torch/transformer.py); meson
sets both. Run with /usr/bin/python3 (Debian's torch).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios.py")
PYTHON = "/usr/bin/python3"


def run(args, timeout=300, env=None, cwd=None):
    full_env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    full_env.update(env or {})
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
    return p


def scenario(*args, timeout=300, env=None):
    p = run([PYTHON, SCENARIOS, *args], timeout=timeout, env=env)
    if p.returncode != 0:
        raise AssertionError(f"scenario {args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_packages(base):
    """The run packages the compiler wrote (one per compile) under the base's run folders."""
    return glob.glob(os.path.join(base, "static_kernel_compile_outputs", "ts*_outputs", "static_kernel_*.run"))


class TempBase(unittest.TestCase):
    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="skc-torch-test-")
        self.addCleanup(shutil.rmtree, self.base, True)


class Models(TempBase):
    """Three models from torch.nn layers, two shapes each, with autograd and under no_grad."""

    def check_model(self, name, batch, seq, d):
        r = scenario("model", name, str(batch), str(seq), str(d), self.base)
        where = f"{name} [{batch}, {seq}, {d}]"
        self.assertEqual(r["report"]["outcome"], "compiled", where)
        for mode, c in r["static_run"].items():
            self.assertTrue(c["allclose"], f"{where} {mode}: static kernels differ from stock torch: {c}")
        for mode, c in r["recording_run"].items():
            self.assertTrue(c["equal"], f"{where} {mode}: recording changed the results: {c}")
        # Every op type the model used and the plugin recorded ran its static kernel.
        used = {op: c for op, c in r["counters"].items() if c["recorded"] > 0}
        self.assertTrue(used, where)
        for op, c in used.items():
            self.assertGreater(c["static"], 0, f"{where}: {op} never ran its static kernel: {c}")
        # A batch size seen only after compile: stock kernels, bit for bit stock torch's results.
        for mode, c in r["new_shape_run"].items():
            self.assertTrue(c["equal"], f"{where} {mode}: the new shape's fallback differs from stock: {c}")
        new = r["counters_new_shape"]
        self.assertEqual(sum(c["static"] for c in new.values()), 0, f"{where}: {new}")
        self.assertGreater(sum(c["stock"] for c in new.values()), 0, f"{where}: {new}")
        self.assertEqual(sum(c["recorded"] for c in new.values()), 0, f"{where}: recorded after compile: {new}")
        # disable(): stock kernels, nothing counted.
        for mode, c in r["disabled_run"].items():
            self.assertTrue(c["equal"], f"{where} {mode}: {c}")
        self.assertFalse(r["counters_changed_after_disable"], where)
        return r

    def test_encoder(self):
        r = self.check_model("encoder", 2, 8, 32)
        used = {op for op, c in r["counters"].items() if c["static"] > 0}
        # The general path (autograd) and the fused fast path (no_grad) both reach these.
        for op in ["MatMulV2", "FusedMatMul", "BatchMatMulV2", "SoftmaxV2", "LayerNormV3", "Gelu", "Add", "Transpose"]:
            self.assertIn(op, used)
        self.check_model("encoder", 3, 16, 64)

    def test_prenorm_gelu(self):
        self.check_model("prenorm_gelu", 2, 12, 32)
        self.check_model("prenorm_gelu", 1, 20, 48)

    def test_mixer(self):
        r = self.check_model("mixer", 2, 8, 32)
        used = {op for op, c in r["counters"].items() if c["static"] > 0}
        for op in ["MatMulV2", "BatchMatMulV2", "Gelu", "Relu", "LayerNormV3", "SoftmaxV2", "Add", "Mul"]:
            self.assertIn(op, used)
        self.check_model("mixer", 4, 6, 40)


class Configs(TempBase):
    def test_bad_configs_are_runtime_errors_naming_field_and_value(self):
        unwritable = "/proc/1"  # not writable, not even for root
        r = scenario("bad_configs", self.base, unwritable)
        e = r["errors"]
        self.assertTrue(e["unknown field"].startswith(
            "skc: option 'op_blacklst': unknown option; known options are: static_kernel_compile, "), e["unknown field"])
        self.assertTrue(e["unknown field"].endswith(
            "super_kernel, compiler_check, cache_dir, cache_mode, remote_cache, remote_cache_read_only, compiler, device, "
            "toolchain_version, op_library, timing, output_cache_mib"), e["unknown field"])
        self.assertEqual(e["wrong type"], "skc: option 'static_kernel_compile': expected true or false, found string \"yes\"")
        self.assertEqual(e["wrong type in list"], "skc: option 'op_blacklist': element 1: expected a string, found integer 7")
        self.assertEqual(e["out of range"], "skc: option 'jobs': expected an integer from 1 to 1024, found 0")
        self.assertEqual(e["missing compiler"], "skc: option 'compiler': \"/nonexistent/op_compiler\" does not exist")
        self.assertEqual(e["compiler not executable"],
                         f"skc: option 'compiler': \"{self.base}/not_executable\" is not an executable file")
        self.assertEqual(e["unwritable base"],
                         "skc: /proc/1: option 'base_dir': not writable by this user (write permission missing)")
        self.assertEqual(e["base is a file"], f"skc: {self.base}/not_executable: option 'base_dir': not a directory")
        self.assertEqual(e["empty device"], "skc: option 'device': must not be empty")
        self.assertEqual(e["not an object"], "skc: options must be a JSON object, found array")
        self.assertTrue(e["not json"].startswith("skc: not valid JSON: "), e["not json"])
        self.assertEqual(e["negative output cache"],
                         "skc: option 'output_cache_mib': expected an integer from 0 to 1048576, found -1")
        self.assertEqual(e["fractional output cache"],
                         "skc: option 'output_cache_mib': expected an integer from 0 to 1048576, found number 1.5")
        self.assertEqual(e["output cache too large"],
                         "skc: option 'output_cache_mib': expected an integer from 0 to 1048576, found 1048577")
        self.assertEqual(e["unwritable base with a cache size"], e["unwritable base"])
        # The bad configs changed nothing: the capacity is still the default, 64 MiB (0 MiB passed its
        # own check in the last one, whose base then failed).
        self.assertEqual(r["output_cache_after_bad"]["capacity_bytes"], 64 << 20)
        self.assertEqual(e["compile without enable"],
                         "skc: no recording session: call torch.ops.skc.enable(config) first")
        self.assertEqual(e["enable twice"], "skc: a recording session is already active: call torch.ops.skc.compile() "
                                            "or torch.ops.skc.disable() first")
        # Nothing half-done: the bad configs wrote nothing, and a good one afterwards works.
        self.assertEqual(r["good_report"]["outcome"], "compiled")
        self.assertEqual(len(run_packages(self.base)), 1)

    @unittest.skipIf(os.geteuid() == 0, "root may write into any folder")
    def test_read_only_base_folder(self):
        ro = os.path.join(self.base, "ro")
        os.mkdir(ro, 0o500)
        r = scenario("bad_configs", self.base, ro)
        self.assertEqual(r["errors"]["unwritable base"],
                         f"skc: {ro}: option 'base_dir': not writable by this user (write permission missing)")


class Stock(TempBase):
    """Where the static kernels must answer as stock torch does, off the happy path."""

    def test_special_values_and_bad_arguments_as_stock(self):
        r = scenario("special_values", self.base)
        self.assertEqual(r["report"]["outcome"], "compiled")
        for call, c in r["calls"].items():
            self.assertIsNone(c["differs"], f"{call}: {c['differs']}")
        ran = {call for call, c in r["calls"].items() if c["static"]}
        # Each value case ran its static kernel (a fallback would prove nothing); the bad arguments,
        # and the calls the plugin leaves to stock ("stock: "), run stock.
        for call in r["calls"]:
            stock_only = call.startswith(("layer_norm", "add of mismatched", "bad: ", "stock: "))
            self.assertEqual(call in ran, not stock_only, f"{call}: static {call in ran}")
        self.assertEqual(r["names"], ["N", "C"])

    def test_later_sessions_run_what_they_compile(self):
        other = os.path.join(self.base, "other")
        os.mkdir(other)
        r = scenario("sessions", self.base, other)
        self.assertEqual(r["first"]["outcome"], "compiled")
        self.assertTrue(r["first"]["static"])
        self.assertEqual((r["first"]["compiled"], r["first"]["reused"]), (1, 0), r)
        self.assertEqual(len(r["first"]["packages"]), 1, r)
        # After disable() the op is not "already compiled": the cache has it, and it runs static.
        self.assertEqual(r["after disable"]["outcome"], "hit", r)
        self.assertEqual(r["after disable"]["already_compiled"], 0, r)
        self.assertEqual((r["after disable"]["compiled"], r["after disable"]["reused"]), (0, 1), r)
        self.assertEqual(r["after disable"]["packages"], r["first"]["packages"], r)
        self.assertTrue(r["after disable"]["static"], r)
        self.assertEqual(r["another base"]["outcome"], "compiled", r)
        self.assertTrue(r["another base"]["static"], r)
        # The same op library still has the kernel: the in-process rule skips it, and it runs static.
        self.assertEqual(r["same base again"]["outcome"], "skipped", r)
        self.assertEqual(r["same base again"]["already_compiled"], 1, r)
        self.assertTrue(r["same base again"]["static"], r)
        g = r["grown"]
        self.assertEqual((g["outcome"], g["already_compiled"], g["compiled"], g["reused"]), ("compiled", 1, 1, 1), r)
        self.assertEqual(g["packages"][0], r["another base"]["packages"][0], r)
        self.assertEqual(len(g["packages"]), 2, r)
        self.assertEqual(g["static_types"], ["Relu", "Tanh"], r)
        cache = os.path.join(other, "static_kernel_compile_outputs", "static_kernel_cache")
        self.assertEqual(len(glob.glob(os.path.join(cache, "*", "composites", g["key"]))), 1, r)
        self.assertIn("error", r["failing compiler"], r)
        self.assertTrue(r["failing compiler"]["error"].startswith("skc: "), r)
        # Nothing the host kernels compile: no error, nothing compiled, and the reasons said.
        n = r["nothing compilable"]
        self.assertEqual(n["outcome"], "skipped", r)
        self.assertFalse(n["static"])
        self.assertTrue(n["equal"])
        self.assertIn("SoftmaxV2: attr axes must name only the last axis", n["not_recorded"])
        self.assertIn("Power: attr power 1.500000 is not supported (2, 3, 0.5, -0.5, -1, -2, 1 or 0)",
                      n["not_recorded"])


    def test_static_outputs_reuse_the_memory_of_freed_ones(self):
        r = scenario("output_cache", self.base)
        d = r["default"]
        self.assertEqual(d["outcome"], "compiled")
        self.assertTrue(d["equal"] and d["two_live_equal"] and d["two_live_distinct"], d)
        self.assertEqual((d["static"], d["static_grad"]), (7, 5), d)  # every call above ran static
        self.assertEqual(d["before"]["capacity_bytes"], 64 << 20)
        # Each op's output came back to the same block from the second call on: 8 of 10 reused.
        for op in (0, 1):
            self.assertEqual(len({a[op] for a in d["addrs"][1:]}), 1, d["addrs"])
        self.assertGreaterEqual(d["after"]["reused"] - d["before"]["reused"], 8, d)
        self.assertEqual(d["profiled_add_bytes"], [64 * 512 * 4], d)  # the profiler sees the output
        z = r["0"]  # output_cache_mib 0: nothing kept, each block freed
        self.assertEqual(z["outcome"], "hit")
        # Counted since the process started: the first case's 7 and 5, its profiled Add, and 7 and 5 again.
        self.assertEqual((z["static"], z["static_grad"]), (15, 10), z)
        self.assertTrue(z["equal"] and z["two_live_equal"] and z["two_live_distinct"], z)
        self.assertEqual((z["before"]["capacity_bytes"], z["before"]["cached_bytes"]), (0, 0), z)
        self.assertEqual(z["after"]["reused"], z["before"]["reused"], z)
        self.assertEqual(z["after"]["cached_bytes"], 0, z)
        self.assertEqual(z["profiled_add_bytes"], [64 * 512 * 4], z)


class Accuracy(TempBase):
    def test_static_kernels_no_less_accurate_than_stock(self):
        r = scenario("accuracy", self.base)
        self.assertEqual(r["report"]["outcome"], "compiled")
        lines, worse = [], []
        for case, c in r["cases"].items():
            if case.startswith("stock: "):  # left to stock: its result, bit for bit
                self.assertFalse(c["static"], f"{case}: ran a static kernel")
                self.assertEqual(c["static_err"], c["stock_err"], case)
                continue
            self.assertTrue(c["static"], f"{case}: did not run its static kernel")
            # Within 2x of stock's error; errors under 1e-7 of the result's scale count as equal.
            floor = 1e-7 * c["scale"]
            ratio = (c["static_err"] + floor) / (c["stock_err"] + floor)
            lines.append(f"{case:36s} stock {c['stock_err']:9.3g}  static {c['static_err']:9.3g}  ratio {ratio:.2f}")
            if ratio > 2.0:
                worse.append(lines[-1])
        print("\n" + "\n".join(lines))
        self.assertEqual(worse, [], "more than 2x stock's error")


class Cache(TempBase):
    def test_second_process_hits_the_cache(self):
        first = scenario("hit", self.base)
        second = scenario("hit", self.base)
        self.assertEqual(first["report"]["outcome"], "compiled")
        self.assertEqual(second["report"]["outcome"], "hit")
        self.assertEqual(second["report"]["key"], first["report"]["key"])
        self.assertEqual(second["report"]["stage_ms"]["compile"], 0)
        self.assertEqual(len(run_packages(self.base)), 1, "the second process compiled")
        for r in (first, second):
            for mode, c in r["static_run"].items():
                self.assertTrue(c["allclose"], f"{mode}: {c}")
            self.assertGreater(sum(c["static"] for c in r["counters"].values()), 0)

    def test_a_new_shape_compiles_only_its_ops(self):
        """Batch 2, then batches 2 and 4 in a new process: only the ops of batch 4 are compiled,
        the others come from the first package; a third process compiles nothing."""
        first = scenario("shapes", self.base, "2")
        second = scenario("shapes", self.base, "2,4")
        third = scenario("shapes", self.base, "2,4")
        n1 = first["report"]["counts"]["compiled"]
        self.assertGreater(n1, 0)
        self.assertEqual(first["report"]["counts"]["reused"], 0)
        c2 = second["report"]["counts"]
        self.assertEqual(second["report"]["outcome"], "compiled")
        self.assertEqual(c2["reused"], n1)  # every op of batch 2, from the first package
        self.assertGreater(c2["compiled"], 0)
        self.assertLess(c2["compiled"], c2["gathered"])
        self.assertEqual(second["report"]["packages"][0], first["report"]["key"])
        self.assertEqual(third["report"]["outcome"], "hit")
        self.assertEqual(third["report"]["counts"]["compiled"], 0)
        self.assertEqual(third["report"]["counts"]["reused"], c2["gathered"])
        self.assertEqual(sorted(third["report"]["packages"]), sorted(second["report"]["packages"]))
        self.assertEqual(len(run_packages(self.base)), 2, "the third process compiled")
        for r in (first, second, third):
            self.assertTrue(r["equal"], r)
            self.assertGreater(r["static_calls"], 0, r)

    def test_example_twice(self):
        """examples/torch/transformer.py, as the README runs it: compiles, then hits."""
        example = os.environ["SKC_TORCH_EXAMPLE"]
        reports = []
        for i in range(2):
            out = os.path.join(self.base, f"report{i}.json")
            p = run([PYTHON, example, "--base", self.base, "--iters", "2", "--report", out])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("op type", p.stdout)
            reports.append(json.load(open(out)))
        self.assertEqual(reports[0]["report"]["outcome"], "compiled")
        self.assertEqual(reports[1]["report"]["outcome"], "hit")
        self.assertTrue(all(r["ok"] for r in reports))


class Examples(TempBase):
    """examples/torch/llama.py and bert.py, small: inference and a training step agree with stock
    torch (outputs, loss, gradients, updated parameters) and run static kernels."""

    def check(self, script, *sizes):
        path = os.path.join(os.path.dirname(os.environ["SKC_TORCH_EXAMPLE"]), script)
        p = run([PYTHON, path, "--base", self.base, "--iters", "1", "--warmup", "0", "--profile-runs", "1",
                 "--pairs", "2", "--seq", "16", *sizes, "--json"])
        self.assertEqual(p.returncode, 0, p.stdout[-4000:] + p.stderr[-4000:])
        summary = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertTrue(summary["ok"])
        self.assertEqual(summary["outcome"], "compiled")
        for phase in ("inference", "training"):
            s = summary["phases"][phase]
            self.assertTrue(s["agree"], f"{script} {phase}: {s['differ']}")
            self.assertGreater(sum(r["static"] for r in s["per_op"]), 0, f"{script} {phase}")
            self.assertGreater(s["static_share"], 0.0, f"{script} {phase}")
            # the paired rounds ran (and each round's compile() was a cache hit: "ok" above)
            self.assertGreater(s["speedup_paired"], 0.0, f"{script} {phase}")
        return summary

    def test_llama(self):
        self.check("llama.py", "--hidden", "64", "--ffn", "160")

    def test_bert(self):
        self.check("bert.py", "--hidden", "64", "--ffn", "128")


class RedisServer:
    """A redis-server of the test's own on a free port of 127.0.0.1, stopped at the end."""

    def __init__(self, test):
        import socket
        import time
        server = shutil.which("redis-server")
        if server is None:
            test.skipTest("no redis-server")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", test.base],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        test.addCleanup(self.stop)
        for _ in range(250):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise AssertionError("redis-server did not start")

    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Remote(TempBase):
    def test_a_second_node_downloads_what_the_first_compiled(self):
        """Two bases (two nodes without a shared file system) and one Redis, via SKC_REMOTE_CACHE."""
        redis = RedisServer(self)
        env = {"SKC_REMOTE_CACHE": redis.url()}
        a, b = os.path.join(self.base, "a"), os.path.join(self.base, "b")
        os.mkdir(a)
        os.mkdir(b)
        first = scenario("hit", a, env=env)
        second = scenario("hit", b, env=env)
        self.assertEqual(first["report"]["outcome"], "compiled")
        self.assertEqual(second["report"]["outcome"], "downloaded")
        self.assertEqual(second["report"]["key"], first["report"]["key"])
        self.assertEqual(len(run_packages(b)), 0, "the second node compiled")
        for mode, c in second["static_run"].items():
            self.assertTrue(c["allclose"], f"{mode}: {c}")
        self.assertGreater(sum(c["static"] for c in second["counters"].values()), 0)


class Torchrun(TempBase):
    def test_four_ranks_compile_and_extract_once(self):
        """torchrun with 4 ranks on the node: the leader compiles and installs once, every rank runs
        static kernels. (--redirects/--tee work around torchrun 1.13 failing at start under Python
        3.11; 1.13 spells the option --nproc_per_node.)"""
        torchrun = shutil.which("torchrun") or "/usr/bin/torchrun"
        example = os.environ["SKC_TORCH_EXAMPLE"]
        reports = os.path.join(self.base, "reports")
        os.mkdir(reports)
        script = (f"import os, runpy, sys; sys.argv = [{example!r}, '--base', {self.base!r}, '--iters', '1', "
                  f"'--quiet', '--report', os.path.join({reports!r}, 'rank' + os.environ['LOCAL_RANK'] + '.json')]; "
                  f"runpy.run_path({example!r}, run_name='__main__')")
        wrapper = os.path.join(self.base, "rank.py")
        with open(wrapper, "w") as f:
            f.write(script + "\n")
        p = run([torchrun, "--standalone", "--nproc_per_node", "4", "--redirects", "9:1", "--tee", "9:1", wrapper],
                timeout=600, cwd=self.base)
        self.assertEqual(p.returncode, 0, p.stdout[-4000:] + p.stderr[-4000:])
        ranks = [json.load(open(os.path.join(reports, f"rank{i}.json"))) for i in range(4)]
        keys = {r["report"]["key"] for r in ranks}
        self.assertEqual(len(keys), 1, keys)
        self.assertEqual(sum(1 for r in ranks if r["report"]["extracted"]), 1)
        self.assertEqual(len(run_packages(self.base)), 1, "more than one compile")
        for i, r in enumerate(ranks):
            self.assertEqual(r["report"]["local_rank"], i)
            self.assertEqual(r["report"]["local_world_size"], 4)
            self.assertEqual(r["report"]["outcome"], "compiled")
            self.assertTrue(r["ok"], f"rank {i}: {r}")
            self.assertGreater(sum(c["static"] for c in r["counters"].values()), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
