# Sourced by the H200 scripts that pose the H200 as a target with no device
# (shortlist_tune.sh, new_families_h200.sh). With W (the work folder) set:
# empties $W, then bench/gpu_setup.sh (changes to the repository's root, sets
# ROOT and OUT, builds kiln and kiln-rt unless KILN_SKIP_BUILD=1, sets K and
# RT), and makes $W/home a KILN_HOME of the tree plus H200-est, a copy of
# configs/targets/H200.yaml that no device matches (its jobs are estimate-only,
# as an AMD target's are where Kiln runs on NVIDIA). Exports KILN_HOME and
# KILN_CATALOG=$W/kiln.db.
rm -rf "$W"; mkdir -p "$W/home/configs"
. "$(dirname "${BASH_SOURCE[0]}")/../gpu_setup.sh" "$W/build.log"
for d in db kernels worker; do ln -s "$ROOT/$d" "$W/home/$d"; done
cp -r "$ROOT/configs/." "$W/home/configs/"
sed -e 's/^name: H200$/name: H200-est/' -e 's/^aliases:.*/aliases: []/' \
    -e 's/^device_match:.*/device_match: ["(no device: estimate only)"]/' \
    "$ROOT/configs/targets/H200.yaml" >"$W/home/configs/targets/H200-est.yaml"
export KILN_HOME=$W/home KILN_CATALOG=$W/kiln.db
