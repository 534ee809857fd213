#!/usr/bin/env python3
"""Checks the layering of a Lockstep source tree; exits 1 and names every violation.

Layers, bottom to top: core < trace < ops < autodiff < data < distribute < keras < apps. Every layer shares
the one include/ directory, so the compiler cannot stop a header of a higher layer from being
included; this check does. The rules:

  1. A file of layer L (include/lockstep/L/**, include/lockstep/L.h, src/L/**) includes only
     headers of layers at or below L. apps/ and examples/ are above every layer.
  2. A public header (include/**) includes only public headers: an internal header (one under
     src/) is not installed, so a public header that included one would not compile for a user.
     apps/ and examples/ build against the installed library alone and follow the same rule.
  3. A public header does not include a third-party header that is an implementation detail of
     the library (MPI, oneDNN, OpenMP, zlib) nor the whole of nlohmann/json: the forward
     declarations in <nlohmann/json_fwd.hpp> are enough for the get_config() declarations.

Usage: check_layering.py ROOT  (ROOT holds include/, src/ and optionally apps/, examples/)
"""
import os
import re
import sys

LAYERS = ["core", "trace", "ops", "autodiff", "data", "distribute", "keras", "apps"]
RANK = {name: i for i, name in enumerate(LAYERS)}
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc")
# Third-party headers a public header must not include (the library links these privately).
PRIVATE_THIRD_PARTY = [
    (re.compile(r"^mpi\.h$|^mpi/|^mpi-ext\.h$"), "MPI, which the library links privately"),
    (re.compile(r"^dnnl"), "oneDNN, which the library links privately"),
    (re.compile(r"^omp\.h$"), "OpenMP, which the library links privately"),
    (re.compile(r"^zlib\.h$"), "zlib, which the library links privately"),
    (re.compile(r"^nlohmann/(?!json_fwd\.hpp$)"),
     "the whole of nlohmann/json (expected <nlohmann/json_fwd.hpp>, its forward declarations)"),
]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def classify(root, path):
    """(layer, is_public) of a file under root, or None when the check does not cover it."""
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) >= 3 and parts[1] == "lockstep":
        if len(parts) == 3:  # an umbrella header: lockstep/<layer>.h, lockstep/lockstep.h
            stem = parts[2].rsplit(".", 1)[0]
            return ("keras" if stem == "lockstep" else stem, True) if (
                stem == "lockstep" or stem in RANK) else None
        return (parts[2], True) if parts[2] in RANK else None
    if parts[0] == "src" and len(parts) >= 3 and parts[1] in RANK:
        return parts[1], False
    if parts[0] in ("apps", "examples"):
        return "apps", True
    return None


def resolve(root, including_file, quoted, name):
    """The file an #include names: (path, layer, is_public), or None for a system header."""
    m = re.match(r"^lockstep/([a-z_]+)(?:/|\.h$)", name)
    if m:
        layer = "keras" if m.group(1) == "lockstep" else m.group(1)
        return os.path.join(root, "include", name), layer, True
    if not quoted:
        return None
    candidates = [os.path.join(os.path.dirname(including_file), name),
                  os.path.join(root, "src", name), os.path.join(root, "include", name)]
    for candidate in candidates:
        if os.path.isfile(candidate):
            kind = classify(root, os.path.normpath(candidate))
            if kind is not None:
                return os.path.normpath(candidate), kind[0], kind[1]
            return None
    first = name.split("/")[0]
    if first in RANK:  # a src-relative internal header that does not exist (yet): still a layer
        return os.path.join(root, "src", name), first, False
    return None


def check(root):
    violations = []
    scanned = 0
    for top in ("include", "src", "apps", "examples"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for filename in sorted(filenames):
                if not filename.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, filename)
                kind = classify(root, path)
                if kind is None:
                    continue
                scanned += 1
                layer, public = kind
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        quoted, name = m.group(1) == '"', m.group(2)
                        close = '"' if quoted else ">"
                        where = f"{rel}:{number}: #include {m.group(1)}{name}{close}"
                        target = resolve(root, path, quoted, name)
                        if target is None:
                            if public and top == "include":
                                for pattern, what in PRIVATE_THIRD_PARTY:
                                    if pattern.search(name):
                                        violations.append(
                                            f"{where}: a public header includes {what}")
                            continue
                        _, target_layer, target_public = target
                        if RANK[target_layer] > RANK[layer]:
                            violations.append(
                                f"{where}: layer '{layer}' includes a header of layer "
                                f"'{target_layer}', which is above it (expected layers "
                                f"{' < '.join(LAYERS[:RANK[layer] + 1])})")
                        if public and not target_public and not (
                                top in ("apps", "examples") and target_layer == "apps"):
                            violations.append(
                                f"{where}: a public file includes the internal header of layer "
                                f"'{target_layer}' (internal headers live under src/ and are "
                                "not installed)")
    return scanned, violations


def main(argv):
    if len(argv) != 2 or not os.path.isdir(os.path.join(argv[1], "include")):
        print(f"usage: {argv[0]} ROOT (expected a directory holding include/ and src/, "
              f"received {argv[1:]!r})", file=sys.stderr)
        return 2
    scanned, violations = check(argv[1])
    for v in violations:
        print(v)
    if scanned == 0:
        print(f"no source files found under {argv[1]}/include or src", file=sys.stderr)
        return 2
    print(f"{scanned} files checked, {len(violations)} layering violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
