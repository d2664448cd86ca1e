"""tests/layering/check_layers.py (ctest `layering`) itself: it must fail on an upward or sideways include and
on an unplaced folder, and pass on a tree that points down."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "tests" / "layering"
spec = importlib.util.spec_from_file_location("check_layers", HERE / "check_layers.py")
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "mpi").mkdir(exist_ok=True)
    (tmp_path / "bench").mkdir(exist_ok=True)
    return tmp_path


def test_downward_includes_pass(tmp_path):
    repo = tree(tmp_path, {
        "src/search/strategy.h": '#include "knowledge/targets.h"\n#include "search/estimate.h"\n',
        "src/explore/scheduler.cpp": '#include "search/strategy.h"\n#include <vector>\n',
        "mpi/coordinator.cpp": '#include "explore/explorer.h"\n#include "protocol.h"\n',
    })
    assert check_layers.check(repo) == []


def test_upward_include_fails(tmp_path):
    repo = tree(tmp_path, {"src/search/strategy.h": '#include "explore/scheduler.h"\n'})
    problems = check_layers.check(repo)
    assert len(problems) == 1
    assert "src/search/strategy.h:1" in problems[0] and "higher layer" in problems[0]


def test_same_layer_include_fails(tmp_path):
    repo = tree(tmp_path, {"src/package/package.cpp": '#  include "explore/select.h"\n'})
    problems = check_layers.check(repo)
    assert len(problems) == 1 and "same layer" in problems[0]


def test_unplaced_folder_fails(tmp_path):
    repo = tree(tmp_path, {"src/newthing/a.cpp": '#include "common/hash.h"\n',
                           "src/search/b.cpp": '#include "newthing/a.h"\n'})
    problems = check_layers.check(repo)
    assert any("'newthing' has no layer" in p for p in problems)
    assert len(problems) == 2


def test_runtime_stays_separate(tmp_path):
    repo = tree(tmp_path, {"src/cli/main.cpp": '#include "runtime/package.h"\n',
                           "src/runtime/api.cpp": '#include "package.h"\n'})
    problems = check_layers.check(repo)
    assert len(problems) == 1 and "separate product" in problems[0]


def test_this_repository_is_clean():
    assert check_layers.check(REPO) == []


def test_cmake_one_library_per_folder_linking_down(tmp_path):
    repo = tree(tmp_path, {"src/CMakeLists.txt": """
add_library(kiln_search STATIC
  search/strategy.cpp
  explore/scheduler.cpp   # not its folder
)
target_link_libraries(kiln_search PUBLIC kiln_catalog kiln_generate)
add_library(kiln_explore STATIC explore/explorer.cpp)
target_link_libraries(kiln_explore PUBLIC kiln_search)
"""})
    problems = check_layers.check_cmake(repo)
    assert len(problems) == 2, problems
    assert any("compiles explore/scheduler.cpp" in p for p in problems)
    assert any("kiln_search links kiln_generate" in p for p in problems)
    assert check_layers.check_cmake(REPO) == []
