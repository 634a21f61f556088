"""The README's first command, scripts/demo.sh, builds its targets by name: each must name exactly one
target of this build (meson refuses an ambiguous name, and the demo then stops before it runs).

usage: demo_targets.py SOURCE_ROOT BUILD_DIR
"""
import json
import os
import re
import subprocess
import sys


def demo_targets(script):
    """(name, optional) for the words of every `targets=(...)` and `targets+=(...)` in the script:
    the script adds the latter only where the build has them (the PyTorch plugin)."""
    out = []
    for m in re.finditer(r"\btargets(\+?)=\(([^)]*)\)", script):
        out += [(word, m.group(1) == "+") for word in m.group(2).split()]
    return out


def main():
    source_root, build_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(source_root, "scripts", "demo.sh")) as f:
        wanted = demo_targets(f.read())
    if not wanted:
        print("scripts/demo.sh: no targets=(...) found")
        return 1
    introspect = subprocess.run(["meson", "introspect", build_dir, "--targets"], check=True,
                                capture_output=True, text=True)
    # (name, the folder of the meson.build that defines it) for every target of the build
    targets = [(t["name"], os.path.relpath(os.path.dirname(t["defined_in"]), source_root))
               for t in json.loads(introspect.stdout)]
    bad = 0
    for name, optional in wanted:
        # "subdir/name" names the target `name` defined in subdir's meson.build; a bare name, any.
        sub, _, base = name.rpartition("/")
        found = [d for n, d in targets if n == base and (not sub or d == sub)]
        where = ", ".join(found)
        if len(found) != 1 and not (optional and not found):
            print(f"scripts/demo.sh builds `{name}`: {len(found)} targets of that name ({where or 'none'})")
            bad += 1
        else:
            print(f"{name}: {where or 'not in this build (optional)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
