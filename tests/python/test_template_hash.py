"""A template's hash (the worker's hello `templates`, part of every job key)
covers every module of the kernels directory the template imports, directly or
through another module, at module level or inside a function
(kiln_worker/evaluation/templates.py). No worker process: the Library itself."""
from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

HOME = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HOME / "worker"))

from kiln_worker.evaluation.templates import Library  # noqa: E402

OPS = """version: 1
operators:
  a: {module: alpha}
  b: {module: beta}
  c: {module: gamma}
"""


def _library(tmp_path: Path) -> Library:
    kdir = tmp_path / "kiln_hash_kernels"
    kdir.mkdir()
    (kdir / "operators.yaml").write_text(OPS)
    (kdir / "common.py").write_text("X = 1\n")
    # alpha: a relative import at module level, and a lazy one in a function
    (kdir / "alpha.py").write_text("from . import common\nfrom .helper import f\n\n"
                                   "def g():\n    from . import lazy\n    return lazy\n")
    # helper imports deep absolutely (through the package's own name)
    (kdir / "helper.py").write_text("from kiln_hash_kernels import deep\n\ndef f():\n    return deep\n")
    (kdir / "deep.py").write_text("Y = 2\n")
    (kdir / "lazy.py").write_text("Z = 3\n")
    # beta imports only common, and a module that is not in the directory
    (kdir / "beta.py").write_text("import math\nfrom . import common\n")
    # gamma imports beta as `import <package>.beta`
    (kdir / "gamma.py").write_text("import kiln_hash_kernels.beta\n")
    return Library(kdir)


def test_imports_followed_transitively(tmp_path):
    lib = _library(tmp_path)
    assert lib.imported_modules("alpha") == {"common", "helper", "deep", "lazy"}
    assert lib.imported_modules("beta") == {"common"}
    assert lib.imported_modules("gamma") == {"beta", "common"}


def test_a_change_in_an_imported_module_changes_the_importers_hash(tmp_path):
    lib = _library(tmp_path)
    before = lib.template_hashes()
    (lib.dir / "deep.py").write_text("Y = 22\n")
    after = lib.template_hashes()
    assert after["alpha"] != before["alpha"]
    assert after["beta"] == before["beta"] and after["gamma"] == before["gamma"]
    (lib.dir / "lazy.py").write_text("Z = 33\n")
    assert lib.template_hashes()["alpha"] != after["alpha"]
    (lib.dir / "beta.py").write_text("from . import common\n")
    final = lib.template_hashes()
    assert final["gamma"] != after["gamma"] and final["beta"] != after["beta"]


def test_a_template_importing_only_common_keeps_the_old_digest(tmp_path):
    lib = _library(tmp_path)
    d = lib.dir
    old = hashlib.sha256(d.joinpath("beta.py").read_bytes() + b"\0common.py\0"
                         + d.joinpath("common.py").read_bytes()).hexdigest()
    assert lib.template_hashes()["beta"] == old


def test_the_digest_is_module_then_common_then_imports_by_name(tmp_path):
    lib = _library(tmp_path)
    d = lib.dir
    h = hashlib.sha256(d.joinpath("alpha.py").read_bytes())
    h.update(b"\0common.py\0" + d.joinpath("common.py").read_bytes())
    for dep in ("deep", "helper", "lazy"):
        h.update(b"\0" + f"{dep}.py".encode() + b"\0" + d.joinpath(f"{dep}.py").read_bytes())
    assert lib.template_hashes()["alpha"] == h.hexdigest()


def test_real_attention_hash_covers_its_gluon_kernel(tmp_path):
    """kernels/attention.py loads attention_wgmma.py only for a `ws` config; an
    edit there still changes attention's hash (and no other template's)."""
    kdir = tmp_path / "kernels"
    shutil.copytree(HOME / "kernels", kdir, ignore=shutil.ignore_patterns("__pycache__"))
    lib = Library(kdir)
    assert {"attention_wgmma", "attention_tiles", "common"} <= lib.imported_modules("attention")
    assert "matmul" in lib.imported_modules("gemm_epilogue")
    before = lib.template_hashes()
    with open(kdir / "attention_wgmma.py", "a") as f:
        f.write("\n# edited\n")
    after = lib.template_hashes()
    assert [m for m in before if before[m] != after[m]] == ["attention"]


def test_real_templates_hash_the_shared_modules_they_import(tmp_path):
    """The shared modules of kernels/ (rowwise.py, checks.py, dim_tiles.py,
    dot_tiles.py, a sibling template) are part of every template that imports
    them: an edit to rowwise.py changes exactly the row templates' hashes."""
    kdir = tmp_path / "kernels"
    shutil.copytree(HOME / "kernels", kdir, ignore=shutil.ignore_patterns("__pycache__"))
    lib = Library(kdir)
    assert {"rowwise", "checks", "softmax"} <= lib.imported_modules("softmax_variants")
    assert {"matmul", "dot_tiles", "checks"} <= lib.imported_modules("bmm")
    assert {"dim_tiles", "checks"} <= lib.imported_modules("reduce_dim")
    before = lib.template_hashes()
    with open(kdir / "rowwise.py", "a") as f:
        f.write("\n# edited\n")
    after = lib.template_hashes()
    assert sorted(m for m in before if before[m] != after[m]) == [
        "layernorm", "reduce", "rmsnorm", "softmax", "softmax_variants"]


def test_kernels_modules_import_no_circle():
    """No module of kernels/ imports, at module level, one that imports it back."""
    lib = Library(HOME / "kernels")
    import ast
    top: dict[str, set[str]] = {}
    for path in sorted((HOME / "kernels").glob("*.py")):
        tree = ast.parse(path.read_bytes())
        body = ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                          type_ignores=[])
        top[path.stem] = set(lib._local_names(body)) - {path.stem}
    for mod, deps in top.items():
        for dep in deps:
            assert mod not in top.get(dep, set()), f"{mod} <-> {dep}"
    # and no circle through lazy imports either, for attention
    assert "attention" not in lib.imported_modules("attention_wgmma")


def test_a_data_file_a_module_reads_is_part_of_the_hash(tmp_path):
    """A template (or a module it imports) that reads a file of the kernels
    directory by name -- pointwise.py its pointwise_grammar.json -- hashes
    that file too: a grammar change changes what the template accepts and
    compiles. Templates that name no such file keep their digest."""
    lib = _library(tmp_path)
    (lib.dir / "deep.py").write_text('import json\nG = json.load(open("grammar.json"))\nNOT_A_FILE = "x.json"\n')
    (lib.dir / "grammar.json").write_text('{"ops": ["add"]}')
    before = lib.template_hashes()
    assert lib.data_files(["alpha", "deep"]) == ["grammar.json"]
    (lib.dir / "grammar.json").write_text('{"ops": ["add", "mul"]}')
    after = lib.template_hashes()
    assert after["alpha"] != before["alpha"]
    assert after["beta"] == before["beta"] and after["gamma"] == before["gamma"]
    real = Library(HOME / "kernels")
    assert real.data_files(["pointwise"]) == ["pointwise_grammar.json"]
