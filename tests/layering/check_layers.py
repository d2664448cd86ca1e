#!/usr/bin/env python3
"""The engine's layers point one way: fails on an #include that runs back up.

Every folder of src/ (and mpi/, bench/, which sit on top) has a layer; a file
may include headers of its own folder and of folders in lower layers only, so
the include picture has no circle and no upward arrow. Folders in one layer do
not include each other. A folder missing from LAYERS is an error too: a new
folder must be placed (and docs/architecture.md's picture updated). In
src/CMakeLists.txt each folder is one library, kiln_<folder>, compiling only its
own folder's files and linking only libraries of lower layers.

    python3 tests/layering/check_layers.py [REPO]      # exit 0: clean; 1: the offending lines
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

# Bottom first. Keep in step with docs/architecture.md ("Layers").
LAYERS: list[list[str]] = [
    ["common"],        # home, hashes, output-file checks: includes nothing of Kiln
    ["stats", "metrics"],
    ["knowledge"],
    ["manifest", "evaluate"],
    ["catalog"],
    ["search"],        # strategies, priors, config model, static estimate, pruning
    ["reflect"],
    ["generate"],
    ["explore", "package", "server"],
    ["batch"],         # the workflows: submit, nightly, package
    ["cli", "mpi", "bench"],
]
# src/runtime (libkilnrt, kiln-rt) is a separate product: it includes nothing
# of the engine and the engine nothing of it.
SEPARATE = {"runtime"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def rank_of() -> dict[str, int]:
    ranks: dict[str, int] = {}
    for i, layer in enumerate(LAYERS):
        for folder in layer:
            ranks[folder] = i
    return ranks


def sources(repo: Path):
    for root in (repo / "src", repo / "mpi", repo / "bench"):
        for path in sorted(root.rglob("*")):
            if path.suffix in (".h", ".cpp") and path.is_file():
                yield path


def folder_of(repo: Path, path: Path) -> str:
    rel = path.relative_to(repo).parts
    return rel[1] if rel[0] == "src" else rel[0]


def check(repo: Path) -> list[str]:
    ranks = rank_of()
    problems: list[str] = []
    for path in sources(repo):
        own = folder_of(repo, path)
        if own in SEPARATE:
            continue
        if own not in ranks:
            problems.append(f"{path.relative_to(repo)}: folder {own!r} has no layer in {Path(__file__).name}")
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or "/" not in m.group(1):
                continue  # "x.h": a header beside the file (its own folder)
            target = m.group(1).split("/")[0]
            where = f"{path.relative_to(repo)}:{lineno}: includes {m.group(1)}"
            if target == own:
                continue
            if target in SEPARATE:
                problems.append(f"{where}: {target}/ is a separate product")
            elif target not in ranks:
                if (repo / "src" / target).is_dir():
                    problems.append(f"{where}: folder {target!r} has no layer")
                # else: a system or third-party header spelled with quotes
            elif ranks[target] >= ranks[own]:
                kind = "the same layer" if ranks[target] == ranks[own] else "a higher layer"
                problems.append(f"{where}: {target}/ is in {kind} than {own}/ "
                                f"({' < '.join('|'.join(l) for l in LAYERS)})")
    return problems


ADD_LIBRARY = re.compile(r"add_library\(\s*kiln_(\w+)\s+STATIC([^)]*)\)", re.S)
LINK = re.compile(r"target_link_libraries\(\s*kiln_(\w+)\s+(?:PUBLIC|PRIVATE)([^)]*)\)", re.S)


def check_cmake(repo: Path) -> list[str]:
    """src/CMakeLists.txt: one library per folder (kiln_<folder>, its sources in
    <folder>/ only), linking only libraries of lower layers."""
    cmake = repo / "src" / "CMakeLists.txt"
    if not cmake.is_file():
        return []
    text = re.sub(r"#[^\n]*", "", cmake.read_text(encoding="utf-8"))
    ranks = rank_of()
    problems: list[str] = []
    for m in ADD_LIBRARY.finditer(text):
        lib, srcs = m.group(1), m.group(2).split()
        if lib not in ranks:
            problems.append(f"src/CMakeLists.txt: kiln_{lib} is not a folder with a layer")
        for src in srcs:
            if not src.startswith(lib + "/"):
                problems.append(f"src/CMakeLists.txt: kiln_{lib} compiles {src}, outside {lib}/")
    for m in LINK.finditer(text):
        lib = m.group(1)
        for dep in re.findall(r"\bkiln_(\w+)", m.group(2)):
            if lib in ranks and dep in ranks and ranks[dep] >= ranks[lib]:
                problems.append(f"src/CMakeLists.txt: kiln_{lib} links kiln_{dep}, not in a lower layer")
    return problems


def main(argv: list[str]) -> int:
    repo = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2]
    problems = check(repo) + check_cmake(repo)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) against the layers")
        return 1
    print(f"layers ok: {sum(1 for _ in sources(repo))} files, {' < '.join('|'.join(l) for l in LAYERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
