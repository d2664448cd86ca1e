#!/usr/bin/env bash
# On a GPU node: `kiln package` (kiln-package/2) of a small batch run
# on the H200, for the H200 (measured) and three AMD targets (estimated, with
# shortlists), with --sign and, where clang-offload-bundler-15 is installed,
# --bundle; then the checks a deployment makes without Kiln: sha256sum -c,
# the Ed25519 signature with openssl, the bundles' entries. The launches and
# verification data come from the real worker's package_info method.
# Prints one row per target (kernels, variants, basis, measured_on, time) and
# the package's total time and time per variant; writes to $OUT:
#   package_h200.json (the rows and checks), manifest.json, package.tar.gz
#   MANIFEST  default: below (add, softmax, layernorm, matmul; 4 targets)
#   WORKERS   default 12
set -uo pipefail
. "$(dirname "$0")/../gpu_setup.sh" /tmp/pk-build.log  # cd to the tree; OUT; builds; K, RT
D=/tmp/pk-h200; rm -rf "$D"; mkdir -p "$D"
M=${MANIFEST:-$D/m.yaml}
[ -n "${MANIFEST:-}" ] || cat > "$M" <<'YAML'
name: package-h200
targets: [H200, MI300X, MI250X, MI355X]
defaults:
  dtypes: [fp16]
  exploration: {strategy: exhaustive, max_candidates: 16}
operators:
  - op: add
    input_shape: [1048576]
  - op: softmax
    input_shape: [4096, 1024]
  - op: layernorm
    input_shape: [4096, 1024]
  - op: matmul
    input_shape: [1024, 1024, 1024]
YAML
export KILN_CATALOG=$D/k.db
$K submit "$M" > /dev/null || exit 1
$K run --device gpu --gpus 1 --workers "${WORKERS:-12}" --scratch "$D/s" > "$D/run.json" 2> "$D/run.log" \
  || { tail -20 "$D/run.log"; exit 1; }
openssl genpkey -algorithm ed25519 -out "$D/key.pem" && openssl pkey -in "$D/key.pem" -pubout -out "$D/pub.pem"
BUNDLE=""; command -v clang-offload-bundler-15 > /dev/null && BUNDLE=--bundle
t0=$(date +%s.%N)
$K package --target H200,MI300X,MI250X,MI355X --out "$D/pkg" --sign "$D/key.pem" $BUNDLE --json \
  > "$D/package.json" 2> "$D/package.log"
rc=$?
t1=$(date +%s.%N)
[ $rc -eq 0 ] || { echo "kiln package failed ($rc):"; tail -20 "$D/package.log"; exit 1; }
python3 - "$D" "$t0" "$t1" "$OUT" "$BUNDLE" <<'PY'
import json, subprocess, sys
from collections import Counter
from pathlib import Path
d, t0, t1, out, bundle = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
pkg = d / "pkg"
man = json.loads((pkg / "manifest.json").read_text())
res = json.loads((d / "package.json").read_text().splitlines()[-1])
sums = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=pkg, capture_output=True, text=True)
(d / "sig.bin").write_bytes(bytes.fromhex((pkg / "SHA256SUMS.sig").read_text().strip()))
sig = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", d / "pub.pem", "-rawin",
                      "-in", pkg / "SHA256SUMS", "-sigfile", d / "sig.bin"], capture_output=True, text=True)
bundles = {}
if bundle:
    for f in sorted({v["file"] for k in man["kernels"] for v in k["variants"] if v["file"].endswith(".co")}):
        r = subprocess.run(["clang-offload-bundler-15", "--list", "--type=o", f"--input={pkg / f}"],
                           capture_output=True, text=True)
        bundles[f] = r.stdout.split()
rows = []
for t in man["targets"]:
    vs = [v for k in man["kernels"] for v in k["variants"] if v["target"] == t["name"]]
    rows.append({"target": t["name"], "target_id": t["target_id"], "kernels": sum(v["rank"] == 0 for v in vs),
                 "variants": len(vs), "basis": dict(Counter(v["basis"] for v in vs if v["rank"] == 0)),
                 "measured_on": t["measured_on"]})
print(f"{'target':8} {'target_id':28} {'kernels':>7} {'variants':>8}  basis / measured on")
for r in rows:
    mo = (r["measured_on"] or {}).get("device") or "-"
    print(f"{r['target']:8} {str(r['target_id']):28} {r['kernels']:7} {r['variants']:8}  {r['basis']} / {mo}")
wall = t1 - t0
print(f"package: {wall:.1f} s for {res['variants']} variants ({wall / max(1, res['variants']):.2f} s each), "
      f"{res['bundles']} bundles; sha256sum -c: {'ok' if sums.returncode == 0 else 'FAILED'}; "
      f"signature: {'ok' if sig.returncode == 0 else 'FAILED'}; "
      f"bundles with 3 gfx entries: {sum(len([e for e in v if e.startswith('hipv4-')]) == 3 for v in bundles.values())}"
      f"/{len(bundles)}")
(out / "package_h200.json").write_text(json.dumps({"rows": rows, "wall_s": wall, "result": res,
                                                   "sha256sum_ok": sums.returncode == 0,
                                                   "signature_ok": sig.returncode == 0, "bundles": bundles,
                                                   "toolchain": man["toolchain"]}, indent=1))
(out / "manifest.json").write_text((pkg / "manifest.json").read_text())
PY
tar -czf "$OUT/package.tar.gz" -C "$D" pkg package.log run.log
