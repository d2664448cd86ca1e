#!/usr/bin/env bash
# The template families added for structural retrieval (bmm, scaled_softmax,
# log_softmax, cumsum, cumprod, reduce_dim, norm_dim, pool2d, pointwise),
# packaged on one NVIDIA H200 and checked by the native runtime:
#   kiln run on the H200 (measured), and estimate-only for H200-est (a copy of
#   configs/targets/H200.yaml that no device matches: a shortlist per kernel);
#   kiln package --target H200      -> kiln-rt verify (launch on the device,
#                                      compare with the shipped float64 data,
#                                      no PyTorch on the path) and kiln-rt bench
#   kiln package --target H200-est  -> kiln-rt tune (times each shortlist)
# Prints one row per kernel (operator, params, shape, verify, bench vs the
# catalog, tune's pick); writes $OUT/new_families.tgz (logs, manifests,
# verify/bench/tune output, the table).
#   KILN_SKIP_BUILD=1 reuse build-gpu/;  MAX_CANDIDATES per job (default 24);
#   NEIGHBOURS=1 package with neighbour checks (a verified range per kernel;
#   slower);  REPS (default 100)
set -uo pipefail
W=/tmp/new_families
. "$(dirname "$0")/h200_est_home.sh"  # cd to the tree; ROOT, OUT, a clean $W; builds; K, RT; KILN_HOME
# one shape per (operator, params): kiln-rt labels kernels by operator, shape and dtype
cat >"$W/manifest.yaml" <<YAML
name: new_families_h200
targets: [H200, H200-est]
defaults:
  dtypes: [fp16]
  exploration: {strategy: exhaustive, max_candidates: ${MAX_CANDIDATES:-24}}
  validation: {seeds: 2}
  benchmark: {warmup: 10, runs: 50}
operators:
  - {op: bmm, input_shape: [16, 512, 512, 256]}
  - {op: bmm, input_shape: [8, 1024, 768, 512], params: {trans_b: true}}
  - {op: bmm, input_shape: [1, 4096, 1, 4096], dtypes: [fp32]}
  - {op: scaled_softmax, input_shape: [8192, 1024], params: {scale: 0.125}}
  - {op: log_softmax, input_shape: [4096, 32768]}
  - {op: cumsum, input_shape: [4096, 4096]}
  - {op: cumprod, input_shape: [2048, 20000], dtypes: [fp32]}
  - {op: reduce_dim, input_shape: [64, 512, 256], params: {kind: sum}}
  - {op: reduce_dim, input_shape: [4096, 4096, 1], params: {kind: argmax}}
  - {op: reduce_dim, input_shape: [32, 1024, 512], params: {kind: amax}}
  - {op: norm_dim, input_shape: [128, 256, 64], params: {kind: l2}}
  - {op: norm_dim, input_shape: [8192, 4096, 1], params: {kind: rms, eps: 1.0e-6}}
  - {op: pool2d, input_shape: [32, 64, 112, 112],
     params: {kind: max, kernel_h: 3, kernel_w: 3, stride_h: 2, stride_w: 2, pad_h: 1, pad_w: 1}}
  - {op: pool2d, input_shape: [16, 128, 56, 56], params: {kind: avg, kernel_h: 2, kernel_w: 2}}
  - {op: pointwise, input_shape: [8192, 8192], params: {expr: "(mul (silu x0) x1)", inputs: "full,full"}}
  - {op: pointwise, input_shape: [4096, 4096],
     params: {expr: "(add (gelu_tanh (add x0 x1)) (mul x2 0.5))", inputs: "full,row,col"}}
YAML
$K submit "$W/manifest.yaml" >"$W/submit.log" 2>&1 || { cat "$W/submit.log"; exit 1; }
t0=$(date +%s)
timeout -s TERM "${KILN_RUN_TIMEOUT:-420}" $K run --device gpu >"$W/run.log" 2>&1
echo "run: rc=$? $(( $(date +%s) - t0 )) s; $(tail -1 "$W/run.log" | cut -c1-200)"
NB=--no-neighbours; [[ ${NEIGHBOURS:-0} == 1 ]] && NB=
for t in H200:exh H200-est:est; do
  tgt=${t%%:*}; n=${t##*:}
  t0=$(date +%s)
  timeout "${PACKAGE_TIMEOUT:-300}" $K package --target "$tgt" --device gpu $NB --out "$W/pkg-$n" \
    >"$W/package-$n.log" 2>&1
  echo "package $tgt: rc=$? $(( $(date +%s) - t0 )) s; $(tail -1 "$W/package-$n.log" | cut -c1-160)"
done
# verify with no Python on the path: the package's own verification data only
env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$RT" verify "$W/pkg-exh" >"$W/verify.txt" 2>&1
echo "kiln-rt verify pkg-exh: rc=$?"
timeout 300 "$RT" bench "$W/pkg-exh" --reps "${REPS:-100}" >"$W/bench.txt" 2>&1
echo "kiln-rt bench pkg-exh: rc=$?"
timeout 300 "$RT" tune "$W/pkg-est" --reps "${REPS:-100}" --out "$W/tune-est.json" >"$W/tune.txt" 2>&1
echo "kiln-rt tune pkg-est: rc=$?"
python3 - "$W" <<'PY' | tee "$W/table.md"
import json, re, sys
from pathlib import Path
w = Path(sys.argv[1])
def lines(name):
    p = w / name
    return p.read_text().splitlines() if p.exists() else []
verify = {}
for l in lines("verify.txt"):
    m = re.match(r"(PASS|FAIL) (\S+ \S+ \S+) rank (\d+)(.*)", l)
    if m and m.group(3) == "0":
        verify[m.group(2)] = m.group(1) + (m.group(4)[:60] if m.group(1) == "FAIL" else "")
bench = {}
for l in lines("bench.txt"):
    m = re.match(r"(\S+ \S+ \S+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(.*)", l)
    if m:
        bench[m.group(1)] = (float(m.group(3)), float(m.group(4)), float(m.group(5)), m.group(6).strip())
tune = {}
try:
    for k in json.loads((w / "tune-est.json").read_text())["kernels"]:
        tune[f"{k.get('operator')} {'x'.join(map(str, k.get('shape', [])))} {k.get('dtype')}"] = k
except (OSError, ValueError, KeyError):
    pass
try:
    man = json.loads((w / "pkg-exh" / "manifest.json").read_text())
except (OSError, ValueError):
    man = {"kernels": []}
print(f"| kernel | params | verify | kiln-rt ms | catalog ms | ratio | tune pick (est) |")
print("|---|---|---|---|---|---|---|")
for k in man["kernels"]:
    label = f"{k['operator']} {'x'.join(map(str, k['shape']))} {k['dtype']}"
    p = ",".join(f"{a}={b}" for a, b in sorted(k["params"].items()) if a not in ("dilation_h", "dilation_w"))
    b = bench.get(label)
    t = tune.get(label) or {}
    pick = f"cand {t.get('candidate_id')} {t.get('median_ms', 0):.4f} ms" if t else "-"
    bcol = f"{b[0]:.4f} | {b[1]:.4f} | {b[2]:.3f}{' ' + b[3] if b[3] else ''}" if b else "- | - | -"
    print(f"| {label} | {p[:48]} | {verify.get(label, '-')} | {bcol} | {pick} |")
print(f"\n{sum(v.startswith('PASS') for v in verify.values())} of {len(man['kernels'])} kernels verified on the device")
PY
tar czf "$OUT/new_families.tgz" -C /tmp --exclude=new_families/pkg-exh/objects \
  --exclude=new_families/pkg-est/objects --exclude='new_families/kiln.db*' --exclude=new_families/home new_families
echo "details: $OUT/new_families.tgz"
