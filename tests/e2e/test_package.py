"""End-to-end tests of `kiln package` (kiln-package/2), `kiln import-measurements`
and `kiln submit --misses`, on a real catalog: a small manifest run on this
machine's CPU (Triton interpreter; AMD and NVIDIA code objects cross-compiled).

The launches and verification data come from the evaluator's `package_info`
method. Where a test says FAKE, `kiln package` asks the scripted evaluator
(tests/data/fake_evaluator), which derives them from the request; the last
test asks the real worker and runs once it has the method.
"""
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import KILN, ROOT, OpenOptions, db_rows, kiln, kilnrt, require_kiln, submitted  # noqa: E402

FAKE = {"KILN_PYTHON": str(ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh")}
AMD = ["MI300X", "MI250X", "MI355X"]
BUNDLER = shutil.which("clang-offload-bundler-15")

MANIFEST = """name: pkgtest
targets: [MI300X, MI250X, MI355X, H200]
defaults:
  dtypes: [fp32]
  exploration: {strategy: exhaustive, max_candidates: 3, timeout_s: 120}
  validation: {seeds: 1}
  benchmark: {warmup: 2, runs: 5}
operators:
  - op: add
    input_shape: [1024]
  - op: softmax
    input_shape: [8, 64]
"""


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    require_kiln()
    tmp = tmp_path_factory.mktemp("pkg")
    catalog, _ = submitted(tmp, MANIFEST)
    kiln("run", "--workers", "2", "--scratch", tmp / "scratch", catalog=catalog)
    assert db_rows(catalog, "SELECT DISTINCT state FROM jobs") == [("done",)]
    return catalog


def fresh_copy(cat, tmp_path):
    c = tmp_path / "copy.db"
    src = sqlite3.connect(cat)
    dst = sqlite3.connect(c)
    src.backup(dst)
    src.close()
    dst.close()
    return c


def package(cat, *args, check=True, env=None, cwd=None):
    e = dict(FAKE, **(env or {}))
    if cwd is None:
        return kiln("package", *args, "--json", catalog=cat, check=check, env=e)
    r = subprocess.run([str(KILN), "package", *map(str, args), "--json"], capture_output=True, text=True,
                       env=dict(os.environ, KILN_CATALOG=str(cat), **e), cwd=cwd, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def manifest(out):
    return json.loads((Path(out) / "manifest.json").read_text())


def variants(man, target=None):
    return [(k, v) for k in man["kernels"] for v in k["variants"] if target in (None, v["target"])]


def unbundle(bundle, entry, out):
    subprocess.run([BUNDLER, "--type=o", f"--targets={entry}", f"--input={bundle}", f"--output={out}",
                    "--unbundle"], check=True, capture_output=True)
    return Path(out).read_bytes()


def best_rows(cat):
    return {(r["op"], r["target"]): r for r in json.loads(kiln("best", "--json", catalog=cat).stdout)}


# --- the package ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundled(cat, tmp_path_factory):
    if not BUNDLER:  # scripts/setup.sh installs it: a missing bundler fails, never skips
        pytest.fail("clang-offload-bundler-15 is not installed (scripts/setup.sh; apt-get install clang-tools-15)")
    tmp = tmp_path_factory.mktemp("bundled")
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", tmp / "key.pem"], check=True)
    subprocess.run(["openssl", "pkey", "-in", tmp / "key.pem", "-pubout", "-out", tmp / "pub.pem"], check=True)
    log = tmp / "info.jsonl"
    r = package(cat, "--target", ",".join(AMD) + ",H200", "--out", tmp / "pkg", "--bundle",
                "--sign", tmp / "key.pem", env={"FAKE_PACKAGE_INFO_LOG": str(log)})
    return dict(tmp=tmp, out=tmp / "pkg", result=json.loads(r.stdout),
                requests=[json.loads(x) for x in log.read_text().splitlines()])


def test_manifest_is_v2_with_toolchain_and_targets(bundled, cat):
    man = manifest(bundled["out"])
    assert man["format"] == "kiln-package/2"
    version = subprocess.run([str(KILN), "--version"], capture_output=True, text=True).stdout.split()[-1]
    assert man["toolchain"] == {"kiln": version, "triton": "3.6.0", "torch": "fake"}  # the evaluator's hello
    assert [t["name"] for t in man["targets"]] == AMD + ["H200"]
    best = best_rows(cat)
    for t in man["targets"]:
        if t["vendor"] == "amd":
            # the code object's own metadata note, as kiln best reads it from the catalog's blob
            notes = {r["code_object"]["note_target"] for (op, tg), r in best.items() if tg == t["name"]}
            assert notes == {t["target_id"]} and t["target_id"] == "amdgcn-amd-amdhsa--" + t["arch"]
        else:  # Triton builds arch-specific code for the H200: the cubin's e_flags say sm_90a
            cubin = next(v for _, v in variants(manifest(bundled["out"]), t["name"]) if v["rank"] == 0)
            data = (bundled["out"] / cubin["file"]).read_bytes()
            flags, abi = int.from_bytes(data[48:52], "little"), data[8]
            accel = bool(flags & 0x8) if abi >= 8 else bool(flags & 0x800)
            assert t["target_id"] == "sm_90" + ("a" if accel else "")
        assert t["measured_on"] is None  # nothing measured on this CPU machine
    assert len(man["kernels"]) == 2


def test_every_variant_has_a_launch_and_verify_file(bundled, cat):
    out = bundled["out"]
    man = manifest(out)
    for k, v in variants(man):
        assert v["grid"] and len(v["grid"]) == 3 and v["args"]
        assert all("bind" in a for a in v["args"])
        assert (out / v["verify"]).is_file()
        ver = json.loads((out / v["verify"]).read_text())
        assert ver["format"] == "kiln-verify/1" and ver["shape"] == k["shape"]
        assert v["range"]["verified_shapes"][0] == k["shape"]  # neighbours were asked for
        if v["target"] in AMD:
            assert v["code_object_version"] in (4, 5, 6)
    # each variant's package_info request carried its job, config and a seed that is its verify seed
    assert len(bundled["requests"]) == bundled["result"]["variants"]
    assert all(q["neighbours"] is True for q in bundled["requests"])
    seeds = {json.loads((out / v["verify"]).read_text())["seed"] for _, v in variants(man)}
    assert seeds == {q["verify_seed"] for q in bundled["requests"]}


def test_shortlist_for_estimated_targets(bundled, cat):
    man = manifest(bundled["out"])
    best = best_rows(cat)
    est = dict(((c, j), e) for c, j, e in db_rows(
        cat, "SELECT c.id, c.job_id, e.estimate_ms FROM candidates c JOIN evaluations e ON e.candidate_id = c.id "
             "WHERE e.status = 'ok'"))
    for k in man["kernels"]:
        for target in AMD + ["H200"]:
            vs = sorted((v for v in k["variants"] if v["target"] == target), key=lambda v: v["rank"])
            assert [v["rank"] for v in vs] == list(range(len(vs))) and 1 <= len(vs) <= 8
            b = best[(k["operator"], target)]
            assert b["basis"] == "estimated" and vs[0]["candidate_id"] == b["candidate_id"]
            job = db_rows(cat, f"SELECT job_id FROM candidates WHERE id = {b['candidate_id']}")[0][0]
            others = [est[(v["candidate_id"], job)] for v in vs[1:]]
            assert others == sorted(others)
            # one variant per tile (configs that differ only in num_stages count once): the
            # first tiles of the correct candidates by estimate, however far, at most 8 in all
            tiles = {json.dumps({a: b for a, b in json.loads(cfg).items() if a != "num_stages"}, sort_keys=True)
                     for (c, j), e in est.items() if j == job
                     for (cfg,) in db_rows(cat, f"SELECT config FROM candidates WHERE id = {c}")}
            assert len(vs) == min(8, len(tiles))
            assert "shortlist_factor" not in vs[0]
            shipped = [json.dumps({a: b for a, b in v["config"].items() if a != "num_stages"}, sort_keys=True)
                       for v in vs]
            assert len(set(shipped)) == len(shipped)


def test_bundle_holds_three_amd_targets(bundled):
    out = bundled["out"]
    man = manifest(out)
    rank0 = {v["file"] for _, v in variants(man) if v["target"] in AMD and v["rank"] == 0}
    for f in rank0:
        assert f.endswith(".co")
        listed = subprocess.run([BUNDLER, "--list", "--type=o", f"--input={out / f}"], capture_output=True,
                                text=True, check=True).stdout.split()
        amd = sorted(x for x in listed if x.startswith("hipv4-"))
        assert amd == sorted("hipv4-amdgcn-amd-amdhsa--" + a for a in ["gfx942", "gfx90a", "gfx950"]), listed
    # every AMD variant's entry unbundles to the code object its sha256 names
    for i, (k, v) in enumerate(variants(man)):
        if v["target"] in AMD:
            data = unbundle(out / v["file"], v["bundle_entry"], bundled["tmp"] / f"u{i}.hsaco")
            assert hashlib.sha256(data).hexdigest() == v["sha256"] and len(data) == v["size"]
            assert int.from_bytes(data[18:20], "little") == 224
        else:
            assert "bundle_entry" not in v and v["file"].endswith(".cubin")
    # no loose .hsaco is left once the bundles hold them
    assert not list((out / "objects").glob("*.hsaco"))


def test_checksums_and_signature(bundled):
    out, tmp = bundled["out"], bundled["tmp"]
    sums = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr
    listed = {line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert listed == on_disk - {"SHA256SUMS", "SHA256SUMS.sig"}
    sig = (out / "SHA256SUMS.sig").read_text()
    assert len(sig) == 129 and sig.endswith("\n")
    (tmp / "sig.bin").write_bytes(bytes.fromhex(sig.strip()))

    def verify(data_file):
        return subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", tmp / "pub.pem", "-rawin",
                               "-in", data_file, "-sigfile", tmp / "sig.bin"], capture_output=True, text=True)
    assert verify(out / "SHA256SUMS").returncode == 0
    tampered = tmp / "tampered"
    tampered.write_bytes((out / "SHA256SUMS").read_bytes().replace(b"a", b"b", 1))
    assert verify(tampered).returncode != 0


def test_sign_with_a_bad_key_writes_nothing(cat, tmp_path):
    (tmp_path / "bad.pem").write_text("not a key\n")
    r = package(cat, "--target", "H200", "--out", tmp_path / "pkg", "--sign", tmp_path / "bad.pem", check=False)
    assert r.returncode == 1 and "bad.pem" in r.stderr and "openssl genpkey" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.pem"]


def test_missing_bundler_is_a_clear_error(cat, tmp_path):
    r = package(cat, "--target", "MI300X", "--out", tmp_path / "pkg", "--bundle", check=False,
                env={"KILN_OFFLOAD_BUNDLER": str(tmp_path / "no-such-bundler")})
    assert r.returncode == 1 and "KILN_OFFLOAD_BUNDLER" in r.stderr
    assert os.listdir(tmp_path) == []


def test_targets_by_architecture(cat, tmp_path):
    r = package(cat, "--target", "gfx942", "--out", tmp_path / "a")
    man = manifest(tmp_path / "a")
    # gfx942 is MI300X and MI325X; only MI300X has jobs here
    assert [t["name"] for t in man["targets"]] == ["MI300X"]
    assert any("MI325X" in w for w in json.loads(r.stdout)["warnings"])
    package(cat, "--target", "sm_90a", "--out", tmp_path / "b")
    assert [t["name"] for t in manifest(tmp_path / "b")["targets"]] == ["H200"]
    bad = package(cat, "--target", "gfx1234", "--out", tmp_path / "c", check=False)
    assert bad.returncode == 2 and "unknown target 'gfx1234'" in bad.stderr and "gfx942" in bad.stderr
    assert not (tmp_path / "c").exists()


# --- --out safety (issue 22, item 1) --------------------------------------------------------

def tree(d):
    """Every path under d with its size (SQLite's -wal/-shm files aside)."""
    return sorted((str(p.relative_to(d)), p.stat().st_size) for p in Path(d).rglob("*")
                  if not p.name.endswith(("-wal", "-shm")))


def test_out_refuses_root_cwd_parent_home_and_catalog_dir(cat, tmp_path):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    db = work / "kiln.db"
    shutil.copy(cat, db)
    (work / "keep.txt").write_text("mine")
    home = tmp_path / "home"
    home.mkdir()
    before = tree(tmp_path)
    cases = [("/", work), (".", work), ("./", work), ("..", work / "sub"), (str(work) + "/", work / "sub"),
             (str(home), work), (str(home) + "//", work), (str(tmp_path), work)]
    for out, cwd in cases:
        r = package(db, "--target", "H200", "--out", out, "--force", cwd=cwd, check=False,
                    env={"HOME": str(home)})
        assert r.returncode == 2, (out, r.stdout, r.stderr)
        assert "refusing" in r.stderr, (out, r.stderr)
    assert tree(tmp_path) == before


def test_out_replaces_only_a_kiln_package(cat, tmp_path):
    out = tmp_path / "dist"
    out.mkdir()
    (out / "notes.txt").write_text("not a package")
    sibling = tmp_path / "dist.tmp-kiln"
    sibling.write_text("unrelated")
    for force in ([], ["--force"]):
        r = package(cat, "--target", "H200", "--out", out, *force, check=False)
        assert r.returncode == 2 and "is not a Kiln package" in r.stderr, r.stderr
    assert (out / "notes.txt").read_text() == "not a package"
    # an empty directory is fine; a package needs --force to be replaced; "dist/" is "dist"
    shutil.rmtree(out)
    out.mkdir()
    package(cat, "--target", "H200", "--out", out)
    first = manifest(out)["created_at"]
    r = package(cat, "--target", "H200", "--out", out, check=False)
    assert r.returncode == 2 and "--force" in r.stderr
    package(cat, "--target", "MI300X", "--out", str(out) + "/", "--force")
    assert [t["name"] for t in manifest(out)["targets"]] == ["MI300X"] and manifest(out)["created_at"] >= first
    assert sibling.read_text() == "unrelated"
    # no temporary directory is left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist", "dist.tmp-kiln"]


def test_force_replaces_a_package_only_by_its_content(cat, tmp_path):
    """Issue 22, item 7: a bare kiln-package marker, or a real package with a file
    added, is not enough for --force to delete the directory."""
    out = tmp_path / "dist"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    (out / "manifest.json").write_text('{"format":"kiln-package/2"}')
    before = tree(tmp_path)
    r = package(cat, "--target", "MI300X", "--out", out, "--force", check=False)
    assert r.returncode == 2 and "is not a Kiln package" in r.stderr, r.stderr
    assert "no SHA256SUMS" in r.stderr, r.stderr
    assert tree(tmp_path) == before
    # SHA256SUMS present but not listing mine.txt: the first foreign file is named
    shutil.rmtree(out)
    package(cat, "--target", "H200", "--out", out)
    for name, text in [("mine.txt", "mine"), ("objects/zz-mine.bin", "mine too")]:
        (out / name).write_text(text)
        r = package(cat, "--target", "MI300X", "--out", out, "--force", check=False)
        assert r.returncode == 2 and f"foreign file {name} (not listed in SHA256SUMS)" in r.stderr, r.stderr
        assert (out / name).read_text() == text
        (out / name).unlink()
    (out / "notes").mkdir()
    r = package(cat, "--target", "MI300X", "--out", out, "--force", check=False)
    assert r.returncode == 2 and "foreign file notes/" in r.stderr, r.stderr
    (out / "notes").rmdir()
    (out / "link").symlink_to(out / "manifest.json")
    r = package(cat, "--target", "MI300X", "--out", out, "--force", check=False)
    assert r.returncode == 2 and "foreign file link (a symbolic link)" in r.stderr, r.stderr
    (out / "link").unlink()
    # the package as written is replaced
    package(cat, "--target", "MI300X", "--out", out, "--force")
    assert [t["name"] for t in manifest(out)["targets"]] == ["MI300X"]


def test_a_file_as_out_is_refused(cat, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = package(cat, "--target", "H200", "--out", f, "--force", check=False)
    assert r.returncode == 2 and "not a directory" in r.stderr and f.read_text() == "x"


# --- catalog paths cannot escape (issue 22, item 3) -------------------------------------------

def test_hostile_operator_name_stays_inside_out(cat, tmp_path):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    db = fresh_copy(cat, tmp_path)
    con = sqlite3.connect(db)
    con.execute("UPDATE jobs SET op = '../../x/pwn', dtype = '../fp32' WHERE op = 'add'")
    con.commit()
    con.close()
    before = tree(tmp_path)
    out = work / "out"
    package(db, "--target", "MI300X,H200", "--out", out, "--bundle")
    after = tree(tmp_path)
    new = {p for p, _ in after} - {p for p, _ in before}
    assert new and all(p.startswith("a/b/out") for p in new), new
    assert not (tmp_path / "x").exists() and not (tmp_path / "a" / "x").exists()
    man = manifest(out)
    ops = {k["operator"] for k in man["kernels"]}
    assert "../../x/pwn" in ops  # the manifest says what the catalog says; file names are sanitised
    for _, v in variants(man):
        assert ".." not in v["file"] and ".." not in v["verify"] and (out / v["file"]).is_file()


# --- import-measurements ---------------------------------------------------------------

def test_import_measurements_round_trip(cat, tmp_path):
    db = fresh_copy(cat, tmp_path)
    package(db, "--target", "MI300X", "--out", tmp_path / "p1")
    man = manifest(tmp_path / "p1")
    picks = {}
    kernels = []
    for k in man["kernels"]:
        vs = sorted((v for v in k["variants"]), key=lambda v: v["rank"])
        assert len(vs) >= 2, "the test needs a shortlist"
        fastest = vs[-1]  # as if the tuner found the last of the shortlist fastest
        picks[k["job_key"]] = fastest["candidate_id"]
        for v in vs:
            ms = 0.010 if v is fastest else 0.020 + 0.001 * v["rank"]
            kernels.append({"job_key": k["job_key"], "target": "MI300X", "candidate_id": v["candidate_id"],
                            "median_ms": ms, "samples": [ms, ms * 1.01, ms * 0.99]})
    meas = {"device": "AMD Instinct MI300X", "driver": "6.8.5", "uuid": "GPU-1234",
            "versions": {"kiln-rt": "0.1.0", "hip": "6.2"}, "kernels": kernels}
    f = tmp_path / "tune.json"
    f.write_text(json.dumps(meas))
    r = json.loads(kiln("import-measurements", f, "--json", catalog=db).stdout)
    assert r["measurements"] == len(kernels) and r["jobs"] == len(man["kernels"]) == r["best_changed"]
    for key, cand in picks.items():
        row = db_rows(db, "SELECT b.candidate_id, b.basis, b.device, b.value_ms FROM best b JOIN jobs j "
                          f"ON j.id = b.job_id WHERE j.key = '{key}'")[0]
        assert row == (cand, "measured", "AMD Instinct MI300X", 0.010)
    # importing the same file again changes no best
    again = json.loads(kiln("import-measurements", f, "--json", catalog=db).stdout)
    assert again["best_changed"] == 0
    assert db_rows(db, "SELECT COUNT(*) FROM imported_measurements")[0][0] == len(kernels)
    # the next package ships the tuned pick, measured on that device, without a shortlist
    package(db, "--target", "MI300X", "--out", tmp_path / "p2")
    man2 = manifest(tmp_path / "p2")
    assert man2["targets"][0]["measured_on"] == {"device": "AMD Instinct MI300X", "driver": "6.8.5",
                                                 "uuid": "GPU-1234"}
    for k in man2["kernels"]:
        assert [v["rank"] for v in k["variants"]] == [0]
        v = k["variants"][0]
        assert v["candidate_id"] == picks[k["job_key"]] and v["basis"] == "measured" and v["value_ms"] == 0.010
        assert v["device"] == "AMD Instinct MI300X" and v["driver"] == "6.8.5"


def test_import_what_kiln_rt_tune_writes_for_a_second_target(cat, tmp_path):
    """kiln-rt tune's file: the file's target as the runtime labels it, per
    kernel the package kernel's job key (its first target's job) and the
    candidate it timed fastest; the candidate decides the job."""
    db = fresh_copy(cat, tmp_path)
    package(db, "--target", "MI300X,MI250X", "--out", tmp_path / "p")
    man = manifest(tmp_path / "p")
    kernels = []
    for k in man["kernels"]:
        v = max((v for v in k["variants"] if v["target"] == "MI250X"), key=lambda v: v["rank"])
        kernels.append({"job_key": k["job_key"], "operator": k["operator"], "shape": k["shape"],
                        "dtype": k["dtype"], "candidate_id": v["candidate_id"], "rank": v["rank"],
                        "median_ms": 0.03, "samples": [0.03, 0.031]})
    f = tmp_path / "tune.json"
    f.write_text(json.dumps({"format": "kiln-measurements/1", "device": "AMD Instinct MI250X", "driver": "6.8",
                             "uuid": "GPU-9", "target": "gfx90a:sramecc+:xnack- (AMD Instinct MI250X)",
                             "kernels": kernels}))
    r = json.loads(kiln("import-measurements", f, "--json", catalog=db).stdout)
    assert r["measurements"] == r["jobs"] == r["best_changed"] == len(man["kernels"])
    rows = db_rows(db, "SELECT j.target, b.basis, b.device, b.candidate_id FROM best b JOIN jobs j ON j.id = b.job_id "
                       "WHERE b.basis = 'measured'")
    assert sorted(rows) == sorted(("MI250X", "measured", "AMD Instinct MI250X", k["candidate_id"]) for k in kernels)
    # the same file claiming another GPU is refused
    f.write_text(f.read_text().replace("gfx90a:sramecc+:xnack- (AMD Instinct MI250X)", "sm_90 (NVIDIA H200)"))
    bad = kiln("import-measurements", f, catalog=db, check=False)
    assert bad.returncode == 2 and "was tuned for MI250X" in bad.stderr


def test_import_measurements_rejects_bad_files(cat, tmp_path):
    db = fresh_copy(cat, tmp_path)
    key, cand = db_rows(db, "SELECT j.key, b.candidate_id FROM jobs j JOIN best b ON b.job_id = j.id "
                            "WHERE j.target = 'MI300X' LIMIT 1")[0]
    good = {"job_key": key, "target": "MI300X", "candidate_id": cand, "median_ms": 0.01, "samples": [0.01]}
    cases = {
        "notjson.json": ("{", "not JSON"),
        "nodevice.json": (json.dumps({"kernels": [good]}), "'device'"),
        "nokernels.json": (json.dumps({"device": "d", "kernels": []}), "'kernels'"),
        "negative.json": (json.dumps({"device": "d", "kernels": [dict(good, median_ms=-1)]}), "kernels[0].median_ms"),
        "unknownjob.json": (json.dumps({"device": "d", "kernels": [good, dict(good, job_key="nope")]}),
                            "kernels[1] (job_key nope): no such job"),
        "wrongtarget.json": (json.dumps({"device": "d", "kernels": [dict(good, target="H200")]}),
                             "was tuned for MI300X, not for the file's target (H200)"),
        "badtarget.json": (json.dumps({"device": "d", "target": "gfx1 (?)", "kernels": [good]}), "unknown target"),
        "wrongcand.json": (json.dumps({"device": "d", "kernels": [dict(good, candidate_id=999999)]}),
                           "candidate 999999 is not in the catalog"),
        "format.json": (json.dumps({"format": "other/1", "device": "d", "kernels": [good]}), "kiln-measurements/1"),
    }
    before = db_rows(db, "SELECT * FROM best ORDER BY job_id")
    for name, (text, msg) in cases.items():
        f = tmp_path / name
        f.write_text(text)
        r = kiln("import-measurements", f, catalog=db, check=False)
        assert r.returncode == 2, (name, r.stderr)
        assert str(f) in r.stderr and msg in r.stderr, (name, r.stderr)
    assert db_rows(db, "SELECT * FROM best ORDER BY job_id") == before
    assert db_rows(db, "SELECT COUNT(*) FROM imported_measurements")[0][0] == 0


# --- misses -> jobs ------------------------------------------------------------------------

def test_submit_misses_makes_jobs_that_run_and_package(cat, tmp_path):
    db = fresh_copy(cat, tmp_path)
    log = tmp_path / "misses.jsonl"
    miss = {"op": "add", "shape": [2048], "dtype": "fp32", "target": "H200", "pid": 1}
    log.write_text("\n".join(json.dumps(m) for m in [
        miss, dict(miss, pid=2),                                                      # the same miss twice
        {"op": "add", "shape": [2048], "dtype": "fp32", "target": "amdgcn-amd-amdhsa--gfx90a:xnack-"},
        # the runtime's labels: "ID (device)" and "TARGET (ID)"
        {"op": "add", "shape": [2048], "dtype": "fp32", "target": "sm_90 (NVIDIA H200)", "time": 1.0},
        {"op": "add", "shape": [2048], "dtype": "fp32", "target": "MI250X (amdgcn-amd-amdhsa--gfx90a)"},
    ]) + "\n")
    jobs_before = db_rows(db, "SELECT COUNT(*) FROM jobs")[0][0]
    r = json.loads(kiln("submit", "--misses", log, "--json", catalog=db).stdout)
    assert (r["misses"], r["distinct_misses"], r["jobs"], r["new_jobs"]) == (5, 2, 2, 2), r
    assert db_rows(db, "SELECT COUNT(*) FROM jobs")[0][0] == jobs_before + 2
    assert sorted(db_rows(db, "SELECT target FROM jobs WHERE shape = '[2048]'")) == [("H200",), ("MI250X",)]
    again = json.loads(kiln("submit", "--misses", log, "--json", catalog=db).stdout)
    assert again["new_jobs"] == 0
    # a manifest asking for the same (default settings) expands to the same keys
    (tmp_path / "same.yaml").write_text(
        "targets: [H200, MI250X]\ndefaults:\n  dtypes: [fp32]\noperators:\n  - op: add\n    input_shape: [2048]\n")
    assert json.loads(kiln("submit", tmp_path / "same.yaml", "--json", catalog=db).stdout)["new_jobs"] == 0
    kiln("run", "--workers", "2", "--scratch", tmp_path / "s", catalog=db)
    package(db, "--target", "H200", "--out", tmp_path / "p")
    shapes = {tuple(k["shape"]) for k in manifest(tmp_path / "p")["kernels"] if k["operator"] == "add"}
    assert (2048,) in shapes


@pytest.mark.parametrize("text,where,msg", [
    ('{"op": "add", "shape": [8], "dtype": "fp32", "target": "H200"}\nnot json\n', ":2:1:", "not a JSON line"),
    ('{"op": "nope", "shape": [8], "dtype": "fp32", "target": "H200"}\n', ":1:1:", "unknown operator"),
    ('{"op": "add", "shape": [0], "dtype": "fp32", "target": "H200"}\n', ":1:1:", "positive"),
    ('{"op": "add", "shape": [8], "dtype": "fp32", "target": "gfx1"}\n', ":1:1:", "unknown target"),
    ('\n{"op": "add", "shape": [8], "dtype": "fp99", "target": "H200"}\n', ":2:1:", "dtype"),
])
def test_submit_misses_rejects_bad_lines(tmp_path, text, where, msg):
    log = tmp_path / "m.jsonl"
    log.write_text(text)
    r = kiln("submit", "--misses", log, catalog=tmp_path / "k.db", check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"{log}{where}") and msg in r.stderr, r.stderr
    assert not (tmp_path / "k.db").exists()


# --- the real worker's package_info ------------------------------------------------------------

def test_real_worker_package_info(cat, tmp_path):
    """Runs once the real evaluator answers package_info (skips while it says the
    method is unknown)."""
    r = kiln("package", "--target", "MI300X", "--out", tmp_path / "p", "--no-neighbours", catalog=cat,
             check=False)
    if r.returncode != 0 and "no package_info method" in r.stderr:
        pytest.skip("the worker has no package_info method yet")
    assert r.returncode == 0, r.stderr
    man = manifest(tmp_path / "p")
    for k, v in variants(man):
        assert k["tensors"] and v["args"] and len(v["grid"]) == 3
        ver = json.loads((tmp_path / "p" / v["verify"]).read_text())
        assert ver["shape"] == k["shape"] and ver["outputs"]


def test_the_runtime_accepts_the_package(bundled):
    """kiln-rt (src/runtime, built beside kiln) checks the signed, bundled
    package statically for each AMD target and the H200: integrity, signature,
    every code object against its target. Skips where kiln-rt is not built."""
    rt = KILN.parent / "kiln-rt"
    if not rt.exists():
        pytest.skip(f"{rt} is not built")
    for target in ["gfx942", "gfx90a", "gfx950", "sm_90a"]:
        r = subprocess.run([str(rt), "verify", str(bundled["out"]), "--pubkey", str(bundled["tmp"] / "pub.pem"),
                            "--target", target], capture_output=True, text=True, timeout=120)
        assert r.returncode in (0, 3), (target, r.stdout, r.stderr)  # 3: verified statically only
        assert "signature ok" in r.stdout and " 0 problems" in r.stdout, (target, r.stdout)


# --- the loop from a deployment back to the catalog ------------------------------------

def _runtime():
    """kiln_kernel_find through libkilnrt (conftest.kilnrt)."""
    import ctypes
    lib = kilnrt()

    def find(pkg, op, shape, dtype):
        """kiln_kernel_find on a package opened for the H200 target with no device:
        (status, error text)."""
        opts = OpenOptions(ctypes.sizeof(OpenOptions), None, b"H200", 0)
        h, k = ctypes.c_void_p(), ctypes.c_void_p()
        assert lib.kiln_package_open(str(pkg).encode(), ctypes.byref(opts), ctypes.byref(h)) == 0, \
            lib.kiln_last_error()
        dims = (ctypes.c_int64 * len(shape))(*shape)
        rc = lib.kiln_kernel_find(h, op.encode(), dims, len(shape), dtype.encode(), ctypes.byref(k))
        err = (lib.kiln_last_error() or b"").decode()
        if rc == 0:
            lib.kiln_kernel_free(k)
        lib.kiln_package_close(h)
        return rc, err
    return find


def test_a_miss_the_runtime_logs_becomes_a_kernel_it_finds(cat, tmp_path, monkeypatch):
    """The runtime's miss log -> kiln submit --misses -> kiln run -> kiln package ->
    the runtime finds the kernel (real worker, real code objects, libkilnrt)."""
    find = _runtime()
    db = fresh_copy(cat, tmp_path)
    log = tmp_path / "misses.jsonl"
    monkeypatch.setenv("KILN_MISS_LOG", str(log))
    kiln("package", "--target", "H200", "--no-neighbours", "--out", tmp_path / "p1", catalog=db)
    assert find(tmp_path / "p1", "add", [1024], "fp32")[0] == 0
    rc, err = find(tmp_path / "p1", "add", [3000], "fp32")
    assert rc != 0 and "untuned shape add 3000 fp32" in err, (rc, err)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["op"] == "add" and lines[0]["shape"] == [3000], lines
    r = json.loads(kiln("submit", "--misses", log, "--json", catalog=db).stdout)
    assert r["new_jobs"] == 1, r
    kiln("run", "--workers", "2", "--scratch", tmp_path / "s", catalog=db)
    kiln("package", "--target", "H200", "--no-neighbours", "--out", tmp_path / "p2", catalog=db)
    assert find(tmp_path / "p2", "add", [3000], "fp32")[0] == 0
    assert len(log.read_text().splitlines()) == 1  # found: nothing more logged
