#!/usr/bin/env python3
"""scripts/test_targets.py BUILD_DIR [--suite S]... [--no-suite S]...: the ninja targets that
`meson test` with the same suite options would build before it runs its tests (each selected
test's executable and the targets it depends on), one per line, for building them ahead of the
tests: scripts/test.sh builds a later configuration in the background while an earlier one tests.

A test is selected as meson test selects it: it is in one of the --suite suites (every test when
none is given) and in none of the --no-suite ones; a suite is named with or without its project
("sanitized" or "skc:sanitized").
"""
import argparse
import json
import os
import subprocess
import sys


def introspect(build, what):
    out = subprocess.run(["meson", "introspect", "--" + what, build], check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout)


def in_suites(test_suites, wanted):
    names = set(test_suites) | {s.split(":", 1)[-1] for s in test_suites}
    return any(w in names for w in wanted)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build")
    parser.add_argument("--suite", action="append", default=[])
    parser.add_argument("--no-suite", action="append", default=[])
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    files_of = {t["id"]: t["filename"] for t in introspect(build, "targets")}
    targets = set()
    for test in introspect(build, "tests"):
        if args.suite and not in_suites(test["suite"], args.suite):
            continue
        if in_suites(test["suite"], args.no_suite):
            continue
        for dep in test["depends"]:
            targets.update(os.path.relpath(f, build) for f in files_of.get(dep, []))
    print("\n".join(sorted(targets)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
