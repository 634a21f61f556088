#!/usr/bin/env python3
"""tests/syntax/check_unbuilt.py BUILD_DIR: every translation unit of the build that this build did
not compile (its object file is absent) is checked with the build's own command, flags and warnings
as errors, as a syntax check (-fsyntax-only): the compiler parses it and instantiates its templates,
which is where its warnings come from, and writes no object code.

scripts/test.sh builds in each configuration only what that configuration's tests run: the g++
build leaves the library's test executables and the benchmarks to the clang++ build's sanitizers,
which leaves the examples and the tools it does not test to the g++ build. This check is what keeps
every translation unit warning-clean on both compilers all the same, at about a third of the cost
of compiling it. In a build directory where everything is built it checks nothing, and says so.

Sources that a build step generates and that are absent (nothing to parse yet) are counted and
named. Two checks run at a time. Exit status 1 when a check fails, with the compiler's output.
"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys


def syntax_command(entry):
    """The entry's compile command, made a syntax check: no object, no dependency file."""
    args = shlex.split(entry["command"])
    out, skip = [], 0
    for i, a in enumerate(args):
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MQ", "-MF", "-MT"):
            skip = 1
            continue
        if a in ("-MD", "-MMD", "-c"):
            continue
        out.append(a)
    return out + ["-fsyntax-only"]


def main():
    if len(sys.argv) != 2:
        print("usage: check_unbuilt.py BUILD_DIR", file=sys.stderr)
        return 2
    build = os.path.abspath(sys.argv[1])
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        entries = json.load(f)
    todo, built, absent = [], 0, []
    for e in entries:
        where = e["directory"]
        if os.path.exists(os.path.join(where, e["output"])):
            built += 1
        elif not os.path.exists(os.path.join(where, e["file"])):
            absent.append(e["file"])
        else:
            todo.append(e)

    def check(e):
        r = subprocess.run(syntax_command(e), cwd=e["directory"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace")
        return e, r

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for e, r in pool.map(check, todo):
            name = os.path.relpath(os.path.join(e["directory"], e["file"]), build)
            if r.returncode == 0:
                print(f"ok {name}")
            else:
                failed += 1
                print(f"FAILED {name} (exit {r.returncode}):\n{r.stdout}")
    print(f"{len(todo)} translation units not built here syntax-checked ({failed} failed); {built} built; "
          f"{len(absent)} generated and not built, not checked" + (": " + ", ".join(absent) if absent else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
