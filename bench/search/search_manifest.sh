# Sourced by the GPU search benchmarks (h200_search.sh, h200_conv2d_search.sh).
#   search_manifest NAME STRATEGY OPERATORS
# prints a manifest for the H200 with the search benchmarks' settings (at most
# 96 candidates and 300 s a job, 3 seeds, 25 warm-up and 100 timed runs) and
# OPERATORS (the YAML lines of its `operators:` list).
search_manifest() {
  cat <<YAML
name: $1
targets: [H200]
defaults:
  exploration: {strategy: $2, max_candidates: 96, timeout_s: 300}
  validation: {seeds: 3}
  benchmark: {warmup: 25, runs: 100}
operators:
$3
YAML
}
