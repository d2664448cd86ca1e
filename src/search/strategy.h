// Which configs of a template's space a job evaluates, in what order.
//
// The principles named by the job's knowledge_constraints act first
// (kiln::apply_principles): `prune` and `bound` rules remove configs, `order`
// rules sort what is left (stable, higher-weight principles first). Then the
// strategy picks:
//
//   exhaustive  up to max_candidates configs, in that order, in one round;
//   random      up to max_candidates configs sampled without replacement with
//               the job's seed, in one round;
//   halving     successive halving over rounds, guided by the config model
//               below: round 0 evaluates the `initial` configs the model ranks
//               best (near-ties broken by the seed, spread over the space;
//               the last `tiles` share of them each on a tile -- BLOCK_* but
//               BLOCK_K -- that no other pick has), after up to `priors`
//               configs that were fastest on similar jobs (SearchSpace::priors,
//               src/search/priors.h; never pruned by the model; one the space
//               lacks stands for its nearest config, at most two knobs away),
//               which take the places of as many model picks, down to two;
//               every later round keeps the best measured configs (their
//               number halves each round, by `keep`) and proposes their
//               unevaluated neighbours (configs that differ in one knob), best
//               predicted first. Configs the model predicts far slower than the
//               best prediction are never proposed (early pruning), except
//               around a survivor the model pruned (a prior that measured well),
//               where the survivor's own prediction is the yardstick. The search
//               ends when the budget (max_candidates) is spent or when every
//               neighbour of the survivors has been evaluated. The budget is
//               max_candidates and at most `budget_share` (a fifth) of the
//               space after the principles, never less than round 0.
//
// next_round() is a pure function of (space, principles, settings, history): the
// template generator calls it each time the scheduler asks for a round, and
// bench/search/replay.cpp calls it against recorded measurements.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/estimate.h"
#include "knowledge/principles.h"
#include "knowledge/targets.h"

namespace kiln {

struct Plan {
  std::vector<nlohmann::json> configs;  // to evaluate, in order
  size_t space_size = 0;                // the template's whole space
  size_t after_principles = 0;          // left after prune/bound rules
  int round = 0;                        // which round this is (halving; 0 otherwise)
  std::vector<std::string> notes;       // what the principles / strategy did, for logs
};

// `backend` (hip | cuda) selects the principles that apply to the target.
// The one-round strategies (exhaustive, random); throws std::invalid_argument
// for any other name.
Plan plan_candidates(const std::vector<nlohmann::json>& space,
                     const std::vector<const Principle*>& principles,
                     const std::string& backend, const std::string& strategy, int max_candidates,
                     unsigned long long seed);

// ---------------------------------------------------------------------------
// The config model: a latency prediction from the config alone, before any
// compile or GPU run. Inputs: the config's knobs (BLOCK_* tile sizes, BLOCK_K
// the reduction step, num_warps, num_stages), the launch grid and the
// template's shared-memory estimate (the worker's `space` answer carries both
// per config as `hints`), the target's specs and the job's minimum traffic. It
// is the static estimate's model (src/search/estimate.cpp: memory and compute
// time at full machine use, waves, tail, latency hiding) with the occupancy
// derived from the config instead of the compiler's report:
//
//   registers  ≈ 24 + tile/threads + (Σ tile dims)·BLOCK_K/threads·bytes/4
//                (accumulator + operand fragments per thread; tile = product of
//                the BLOCK_* knobs other than BLOCK_K), or the template's own
//                estimate when its hints carry `registers` (conv2d)
//   blocks/CU  = min(warp slots / num_warps, LDS / shared_bytes,
//                    register file / (registers · threads)), at least 1
//   tail       = blocks / (⌈blocks / slots⌉ · slots), slots = blocks/CU · CUs;
//                a grid smaller than one round: CUs with a block / CUs
//   hiding     = min(1, resident warps per SIMD of a busy CU · max(1, num_stages − 1) / 2)
//                (a software pipeline keeps num_stages − 1 loads in flight)
//   operands   tiled reductions (BLOCK_K, flops > 0) re-read their operands
//                once per tile: flops/2 · bytes · Σ 1/tile dim, served by the L2
//                at 2× the HBM bandwidth (target key l2_bandwidth_gbs overrides)
//   spill      (registers / max per thread)^3 above the limit (255 on NVIDIA,
//                512 on CDNA, 256 on other AMD), else 1
//
//   ms = max(memory, compute, operands) ÷ (tail · hiding) · spill + launch
//
// Its absolute values mean nothing; it orders configs of one job.
struct ConfigPrediction {
  double ms = 0;
  double registers = 0;       // estimated per thread
  bool spills = false;        // registers above the per-thread limit
  double blocks_per_cu = 1;   // resident blocks per CU/SM (warps, shared memory, registers)
  double utilisation = 1;     // tail × hiding
  double operand_ms = 0;      // the operand re-read term
  double issue_ms = 0;        // instruction issue time (hint `instructions`), else 0
  double memory_efficiency = 1;  // bytes in flight / bytes needed per SM (hint `bytes_in_flight`), else 1
};

// nullopt when the target lacks the figures (bandwidth, compute units).
std::optional<ConfigPrediction> predict_config(const Target& target, const std::string& dtype,
                                               const Traffic& traffic, const nlohmann::json& config,
                                               const nlohmann::json& hint);

// ---------------------------------------------------------------------------
// Round-by-round planning.

// A job's search space, as the generator sees it.
struct SearchSpace {
  std::vector<nlohmann::json> configs;  // the template's space, in the worker's order
  std::vector<nlohmann::json> hints;    // per config: {"grid": [x,y,z], "shared_bytes": n}; may be
                                        // empty or shorter (no hints: no waves/occupancy terms)
  const Target* target = nullptr;       // nullptr: no model; principle order instead
  std::string dtype;
  Traffic traffic;
  // Configs that were fastest on similar jobs, most telling first
  // (src/search/priors.h); halving evaluates up to SearchSettings::priors of
  // those that are in the space in round 0, before the model's picks.
  std::vector<nlohmann::json> priors;
};

struct SearchSettings {
  std::string strategy = "exhaustive";  // exhaustive | random | halving
  int max_candidates = 64;              // exhaustive/random: how many; halving: the evaluation budget
  int initial = 0;                      // halving: round-0 size; 0: ⌈√space / 2⌉ clamped to [2, 8]
  double keep = 0.5;                    // halving: survivors shrink by this factor each round
  double prune = 1.5;                   // halving: never propose a config predicted > prune × best
  double tiles = 0.5;                   // halving: share of round 0 given to tiles no other pick has
  int priors = 2;                       // halving: round 0 takes up to this many SearchSpace::priors
  double budget_share = 0.2;            // halving: evaluate at most this share of the space (0 or 1: no cap)
  unsigned long long seed = 0;

  // From a job's spec["explore"]: strategy, max_candidates, seed, and for
  // halving the optional "budget" (overrides max_candidates) and
  // "halving": {"initial", "keep", "prune", "tiles", "priors", "budget_share"}.
  static SearchSettings from_explore(const nlohmann::json& explore);
};

// One evaluated config of the job.
struct Evaluated {
  nlohmann::json config;
  std::optional<double> score_ms;  // measured median, else the static estimate; nullopt: failed
  int round = 0;                   // the round that proposed it
};

// The next round's configs: none means the search is over. Exhaustive and
// random return their whole plan every time (the scheduler skips what was
// evaluated, so the second round is empty); halving returns only configs not
// in `history`.
Plan next_round(const SearchSpace& space, const std::vector<const Principle*>& principles,
                const std::string& backend, const SearchSettings& settings,
                const std::vector<Evaluated>& history);

// The names next_round accepts.
const std::vector<std::string>& strategy_names();

}  // namespace kiln
