#!/usr/bin/env bash
# Run ON A TWO-GPU MACHINE: the same exploration on 1 GPU and on 2 GPUs.
# 1 GPU: `kiln run --workers 8` on GPU 0. 2 GPUs: two `kiln run --shard i/2
# --workers 8` processes, one per GPU (CUDA_VISIBLE_DEVICES), each on its own
# node-local catalog, then `kiln merge`. Each run gets a cold Triton cache.
# Prints wall times, candidates/s and the speed-up; writes logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
scripts/gpu/build_on_device.sh || exit 1
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
K=$PWD/build-gpu/kiln
M=${MANIFEST:-jobs/examples/anchors_h200.yaml}
nvidia-smi -L | tee "$OUT/gpus.txt"
now() { date +%s.%N; }
rm -rf /tmp/one /tmp/two && mkdir -p /tmp/one /tmp/two
KILN_CATALOG=/tmp/one/k.db $K submit "$M" >/dev/null
t0=$(now)
CUDA_VISIBLE_DEVICES=0 KILN_CATALOG=/tmp/one/k.db $K run --device gpu --workers 8 --scratch /tmp/one/s --json >"$OUT/one.json" 2>"$OUT/one.log"
t1=$(now)
for i in 0 1; do KILN_CATALOG=/tmp/two/k$i.db $K submit "$M" >/dev/null; done
t2=$(now)
for i in 0 1; do
  CUDA_VISIBLE_DEVICES=$i KILN_CATALOG=/tmp/two/k$i.db $K run --device gpu --workers 8 --shard $i/2 \
    --scratch /tmp/two/s$i --json >"$OUT/two$i.json" 2>"$OUT/two$i.log" &
done
wait
t3=$(now)
$K merge /tmp/two/merged.db /tmp/two/k0.db /tmp/two/k1.db >/dev/null
python3 - "$t0" "$t1" "$t2" "$t3" "$OUT" <<'PY'
import json, sys, sqlite3
t0, t1, t2, t3 = map(float, sys.argv[1:5]); out = sys.argv[5]
one = json.load(open(f"{out}/one.json"))
two = [json.load(open(f"{out}/two{i}.json")) for i in (0, 1)]
n1 = one["candidates"]; n2 = sum(t["candidates"] for t in two)
w1, w2 = t1 - t0, t3 - t2
merged = sqlite3.connect("/tmp/two/merged.db").execute("SELECT COUNT(*) FROM jobs WHERE state='done'").fetchone()[0]
print(f"| GPUs | wall s | candidates | candidates/s |\n| --- | ---: | ---: | ---: |")
print(f"| 1 | {w1:.1f} | {n1} | {n1 / w1:.2f} |")
print(f"| 2 | {w2:.1f} | {n2} | {n2 / w2:.2f} |")
print(f"throughput 2 GPUs / 1 GPU: {(n2 / w2) / (n1 / w1):.2f}x; merged catalog: {merged} jobs done")
for i, t in enumerate(two): print(f"shard {i}: {t['candidates']} candidates in {t['wall_s']:.1f} s")
PY
