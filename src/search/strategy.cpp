#include "search/strategy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include "search/model_terms.h"

namespace kiln {

using nlohmann::json;

namespace {

using namespace model_terms;

// Base registers per thread: addresses, loop counters, masks.
constexpr double kBaseRegisters = 24;
// Halving: predictions within this fraction of each other are ties (the model
// cannot tell them apart); the seed breaks them.
constexpr double kTie = 0.03;
// Halving: the smallest round after round 0 (two configs keep two workers busy).
constexpr int kMinRoundWidth = 2;
// Halving: a prior not in the space stands for a config at most this many knobs away.
constexpr size_t kPriorReach = 2;
// Halving: the model's picks in a round 0 that has priors (at least, where `initial` allows).
constexpr int kMinModelPicks = 2;

// obj[key] when obj is an object holding a number above 0 there: a config's
// hint, or a figure a target file may carry (its raw YAML).
int max_registers_per_thread(const Target& t) {
  if (t.vendor == "nvidia") return 255;
  if (t.arch.rfind("gfx9", 0) == 0) return 512;  // CDNA: 256 arch VGPRs + 256 AGPRs
  return 256;
}

std::string key_of(const json& config) { return config.dump(); }

size_t hamming(const json& a, const json& b) {
  size_t d = 0;
  for (auto it = a.begin(); it != a.end(); ++it) {
    auto jt = b.find(it.key());
    if (jt == b.end() || *jt != *it) ++d;
  }
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!a.contains(it.key())) ++d;
  return d;
}

// The tile a config computes: its BLOCK_* knobs except the reduction step BLOCK_K.
std::string tile_key(const json& c) {
  std::string k;
  for (auto it = c.begin(); it != c.end(); ++it)
    if (it.key().rfind("BLOCK", 0) == 0 && it.key() != "BLOCK_K") k += it.key() + "=" + it->dump() + ";";
  return k;
}

Plan one_round(const std::vector<json>& space, const std::vector<const Principle*>& principles,
               const std::string& backend, const std::string& strategy, int max_candidates,
               unsigned long long seed) {
  Plan plan;
  plan.space_size = space.size();
  RuleResult ruled = apply_principles(space, principles, backend);
  if (ruled.relaxed)
    plan.notes.push_back("principles would remove every one of " + std::to_string(space.size()) +
                         " configs; keeping all, ordered by the principles");
  else if (ruled.removed > 0)
    plan.notes.push_back("principles removed " + std::to_string(ruled.removed) + " of " +
                         std::to_string(space.size()) + " configs");
  std::vector<json>& kept = ruled.configs;
  plan.after_principles = kept.size();

  const size_t n = std::min<size_t>(kept.size(), static_cast<size_t>(std::max(0, max_candidates)));
  if (strategy == "exhaustive") {
    if (n < kept.size())
      plan.notes.push_back("max_candidates " + std::to_string(max_candidates) + " < space " +
                           std::to_string(kept.size()) + ": evaluating the first " +
                           std::to_string(n) + " in principle order");
    plan.configs.assign(kept.begin(), kept.begin() + static_cast<long>(n));
  } else {
    std::mt19937_64 rng(seed);
    std::vector<size_t> idx(kept.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(n);
    std::sort(idx.begin(), idx.end());  // keep principle order among the sampled
    for (size_t i : idx) plan.configs.push_back(kept[i]);
  }
  return plan;
}

// --- halving -------------------------------------------------------------------

struct Ranked {
  std::vector<json> configs;      // after principles
  std::vector<double> pred;       // model ms, or the principle rank when there is no model
  std::vector<bool> allowed;      // not pruned by the model
  bool model = false;
  size_t pruned = 0;
};

Ranked rank_space(const SearchSpace& s, std::vector<json> kept) {
  Ranked r;
  std::map<std::string, size_t> original;
  for (size_t i = 0; i < s.configs.size(); ++i) original.emplace(key_of(s.configs[i]), i);
  r.configs = std::move(kept);
  const size_t n = r.configs.size();
  r.pred.assign(n, 0);
  r.allowed.assign(n, true);
  bool model = s.target != nullptr;
  for (size_t i = 0; i < n && model; ++i) {
    json hint = json::object();
    if (auto it = original.find(key_of(r.configs[i])); it != original.end() && it->second < s.hints.size() &&
                                                       s.hints[it->second].is_object())
      hint = s.hints[it->second];
    std::optional<ConfigPrediction> p;
    try {
      p = predict_config(*s.target, s.dtype, s.traffic, r.configs[i], hint);
    } catch (const std::exception&) {
      p.reset();
    }
    if (!p || !std::isfinite(p->ms)) model = false;
    else r.pred[i] = p->ms;
  }
  r.model = model && n > 0;
  if (!r.model)
    for (size_t i = 0; i < n; ++i) r.pred[i] = static_cast<double>(i);  // principle order
  return r;
}

void apply_pruning(Ranked& r, double factor) {
  if (!r.model || r.configs.empty()) return;
  const double best = *std::min_element(r.pred.begin(), r.pred.end());
  for (size_t i = 0; i < r.configs.size(); ++i) r.allowed[i] = r.pred[i] <= factor * best;
  r.pruned = static_cast<size_t>(std::count(r.allowed.begin(), r.allowed.end(), false));
}

// Configs by prediction, near-ties (within kTie of the tier's first) shuffled
// with the seed; `exclude` are left out. Then a greedy pick of `count` that
// differ pairwise in at least two knobs where possible (a spread sample of the
// best tier rather than four copies of one tile), filled up in order.
std::vector<size_t> pick_spread(const Ranked& r, const std::set<size_t>& exclude, size_t count,
                                unsigned long long seed, double tile_share) {
  std::vector<size_t> order;
  for (size_t i = 0; i < r.configs.size(); ++i)
    if (!exclude.count(i) && r.allowed[i]) order.push_back(i);
  if (order.empty())  // every remaining config was pruned: the model is all we have
    for (size_t i = 0; i < r.configs.size(); ++i)
      if (!exclude.count(i)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r.pred[a] < r.pred[b]; });
  if (r.model) {
    std::mt19937_64 rng(seed);
    for (size_t begin = 0; begin < order.size();) {
      size_t end = begin + 1;
      while (end < order.size() && r.pred[order[end]] <= r.pred[order[begin]] * (1 + kTie)) ++end;
      std::shuffle(order.begin() + static_cast<long>(begin), order.begin() + static_cast<long>(end), rng);
      begin = end;
    }
  }
  std::vector<size_t> picked;
  // With the model: the last `tile_share` of the picks go to tiles (the BLOCK_*
  // knobs but BLOCK_K) that no earlier pick has, the best predicted of each: a
  // model that is wrong about a whole tile shape (as conv2d's was about
  // 256-pixel tiles once K took several steps) then cannot fill the round.
  const size_t diverse =
      r.model ? static_cast<size_t>(std::floor(static_cast<double>(count) * std::clamp(tile_share, 0.0, 1.0))) : 0;
  // Picks in order, up to `limit` in all, configs that differ from every pick
  // in at least two knobs.
  auto pick_spread_up_to = [&](size_t limit) {
    for (size_t i : order) {
      if (picked.size() >= limit) break;
      if (std::find(picked.begin(), picked.end(), i) != picked.end()) continue;
      if (std::all_of(picked.begin(), picked.end(),
                      [&](size_t j) { return hamming(r.configs[i], r.configs[j]) >= 2; }))
        picked.push_back(i);
    }
  };
  pick_spread_up_to(count - diverse);
  if (diverse > 0) {
    std::set<std::string> tiles;
    for (size_t j : picked) tiles.insert(tile_key(r.configs[j]));
    for (size_t i : order) {
      if (picked.size() >= count) break;
      if (tiles.insert(tile_key(r.configs[i])).second) picked.push_back(i);
    }
  }
  pick_spread_up_to(count);
  for (size_t i : order) {
    if (picked.size() >= count) break;
    if (std::find(picked.begin(), picked.end(), i) == picked.end()) picked.push_back(i);
  }
  return picked;
}

// Configs that differ from config i in one knob; where the space has fewer
// than two of those (irregular spaces: the warps on offer depend on the tile),
// also those that differ in two.
std::vector<size_t> neighbourhood(const Ranked& r, size_t i) {
  std::vector<size_t> d1, d2;
  for (size_t j = 0; j < r.configs.size(); ++j) {
    if (j == i) continue;
    const size_t d = hamming(r.configs[i], r.configs[j]);
    if (d == 1) d1.push_back(j);
    else if (d == 2) d2.push_back(j);
  }
  if (d1.size() < 2) d1.insert(d1.end(), d2.begin(), d2.end());
  return d1;
}

int default_initial(size_t space) {
  const int n = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(space)) / 2.0));
  return std::clamp(n, 2, 8);
}

Plan halving(const SearchSpace& s, const std::vector<const Principle*>& principles,
             const std::string& backend, const SearchSettings& st,
             const std::vector<Evaluated>& history) {
  Plan plan;
  plan.space_size = s.configs.size();
  RuleResult ruled = apply_principles(s.configs, principles, backend);
  plan.after_principles = ruled.configs.size();
  const bool first = history.empty();
  if (first) {
    if (ruled.relaxed)
      plan.notes.push_back("principles would remove every one of " + std::to_string(s.configs.size()) +
                           " configs; keeping all, ordered by the principles");
    else if (ruled.removed > 0)
      plan.notes.push_back("principles removed " + std::to_string(ruled.removed) + " of " +
                           std::to_string(s.configs.size()) + " configs");
  }
  Ranked r = rank_space(s, std::move(ruled.configs));
  apply_pruning(r, std::max(1.0, st.prune));
  const size_t n = r.configs.size();
  if (n == 0) return plan;

  const int max_candidates = std::max(0, st.max_candidates);
  int initial = std::max(1, std::min(st.initial > 0 ? st.initial : default_initial(n), max_candidates));

  // Where the history lies in the space; the round is one past the last.
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) index.emplace(key_of(r.configs[i]), i);
  std::set<size_t> evaluated;
  std::vector<std::pair<double, size_t>> ok;
  int last_round = -1;
  for (const Evaluated& e : history) {
    last_round = std::max(last_round, e.round);
    auto it = index.find(key_of(e.config));
    if (it == index.end()) continue;
    evaluated.insert(it->second);
    if (e.score_ms && std::isfinite(*e.score_ms)) ok.emplace_back(*e.score_ms, it->second);
  }
  std::sort(ok.begin(), ok.end());
  plan.round = first ? 0 : last_round + 1;

  // The priors round 0 takes, in their order, up to st.priors. The model does
  // not prune them: they are measurements, if of other shapes. A prior this
  // space lacks (another shape's space: conv2d's BLOCK_N stops at the output
  // channels) stands for its nearest config here, at most kPriorReach knobs
  // away, the best predicted among equals.
  auto nearest = [&](const json& p) -> std::optional<size_t> {
    if (auto it = index.find(key_of(p)); it != index.end()) return it->second;
    std::optional<size_t> best;
    size_t best_d = kPriorReach + 1;
    for (size_t i = 0; i < n; ++i) {
      const size_t d = hamming(p, r.configs[i]);
      if (d < best_d || (d == best_d && best && r.pred[i] < r.pred[*best])) {
        best = i;
        best_d = d;
      }
    }
    return best_d <= kPriorReach ? best : std::nullopt;
  };
  std::vector<size_t> priors;
  for (const json& p : s.priors) {
    if (static_cast<int>(priors.size()) >= std::min(st.priors, max_candidates)) break;
    auto at = nearest(p);
    if (at && std::find(priors.begin(), priors.end(), *at) == priors.end()) priors.push_back(*at);
  }
  // With priors, they take round-0 places of the model's picks, down to
  // kMinModelPicks: measured configs of similar jobs are a better bet than the
  // model's third and fourth guesses, and the round stays small.
  const int model_picks =
      priors.empty() ? initial
                     : std::min(initial, std::max(kMinModelPicks, initial - static_cast<int>(priors.size())));
  const int round0 = model_picks + static_cast<int>(priors.size());
  // The budget: max_candidates, and at most a budget_share of the space (never
  // less than round 0).
  int budget = max_candidates;
  if (st.budget_share > 0 && st.budget_share < 1)
    budget = std::min(budget, std::max(round0, static_cast<int>(std::floor(st.budget_share * static_cast<double>(n)))));
  const int used = static_cast<int>(history.size());
  const int left = budget - used;
  if (first) {
    plan.notes.push_back(
        "halving: budget " + std::to_string(budget) + " of " + std::to_string(n) + " configs; round 0: " +
        (priors.empty() ? "" : std::to_string(priors.size()) + " configs that were fastest on similar jobs, then ") +
        std::to_string(std::min(model_picks, budget)) +
        (r.model ? " ranked by the config model" : " in principle order") +
        (r.pruned ? ", " + std::to_string(r.pruned) + " pruned (predicted > " +
                        std::to_string(st.prune).substr(0, 4) + "x the best)"
                  : ""));
  }
  if (left <= 0) return plan;

  std::vector<size_t> chosen;
  if (evaluated.empty()) {
    // Round 0: the priors, then a spread sample of the best predicted.
    chosen.assign(priors.begin(), priors.begin() + std::min<long>(left, static_cast<long>(priors.size())));
    std::set<size_t> taken(priors.begin(), priors.end());
    const int more = std::min(model_picks, left - static_cast<int>(priors.size()));
    for (size_t i : pick_spread(r, taken, static_cast<size_t>(std::max(0, more)), st.seed, st.tiles))
      chosen.push_back(i);
  } else if (ok.empty()) {
    // Nothing correct yet: the next spread sample of the best predicted.
    chosen = pick_spread(r, evaluated, static_cast<size_t>(std::min(initial, left)), st.seed, st.tiles);
  } else {
    // Keep the best measured (fewer each round), propose their unevaluated
    // neighbours, best predicted first, one survivor after another.
    const double k_real = round0 * std::pow(std::clamp(st.keep, 0.01, 1.0), plan.round);
    const size_t k = std::min(ok.size(), static_cast<size_t>(std::max(1.0, std::floor(k_real))));
    const size_t width = static_cast<size_t>(std::min<long>(left, std::max<long>(kMinRoundWidth, static_cast<long>(k))));
    std::vector<std::vector<size_t>> lists;
    for (size_t a = 0; a < k; ++a) {
      // A survivor the model pruned (a prior) measured well: the model is wrong
      // about that corner, so its neighbours are pruned against the survivor's
      // own prediction instead of the best prediction.
      const size_t at = ok[a].second;
      auto eligible = [&](size_t j) {
        return r.allowed[j] || (!r.allowed[at] && r.pred[j] <= std::max(1.0, st.prune) * r.pred[at]);
      };
      std::vector<size_t> nb;
      for (size_t j : neighbourhood(r, at))
        if (!evaluated.count(j) && eligible(j)) nb.push_back(j);
      std::stable_sort(nb.begin(), nb.end(), [&](size_t x, size_t y) { return r.pred[x] < r.pred[y]; });
      lists.push_back(std::move(nb));
    }
    std::vector<size_t> pos(lists.size(), 0);
    for (bool more = true; more && chosen.size() < width;) {
      more = false;
      for (size_t a = 0; a < lists.size() && chosen.size() < width; ++a) {
        while (pos[a] < lists[a].size() &&
               std::find(chosen.begin(), chosen.end(), lists[a][pos[a]]) != chosen.end())
          ++pos[a];
        if (pos[a] < lists[a].size()) {
          chosen.push_back(lists[a][pos[a]++]);
          more = true;
        }
      }
    }
  }
  for (size_t i : chosen) plan.configs.push_back(r.configs[i]);
  return plan;
}

}  // namespace

Plan plan_candidates(const std::vector<json>& space, const std::vector<const Principle*>& principles,
                     const std::string& backend, const std::string& strategy, int max_candidates,
                     unsigned long long seed) {
  if (strategy != "exhaustive" && strategy != "random")
    throw std::invalid_argument("unknown strategy '" + strategy + "' (exhaustive, random)");
  return one_round(space, principles, backend, strategy, max_candidates, seed);
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"exhaustive", "random", "halving"};
  return names;
}

SearchSettings SearchSettings::from_explore(const json& ex) {
  SearchSettings s;
  if (!ex.is_object()) return s;
  s.strategy = ex.value("strategy", s.strategy);
  s.max_candidates = ex.value("max_candidates", s.max_candidates);
  s.seed = ex.value("seed", s.seed);
  if (auto b = ex.find("budget"); b != ex.end() && b->is_number_integer() && b->get<int>() > 0)
    s.max_candidates = b->get<int>();
  if (auto h = ex.find("halving"); h != ex.end() && h->is_object()) {
    if (h->contains("initial") && (*h)["initial"].is_number_integer())
      s.initial = std::max(0, (*h)["initial"].get<int>());
    if (h->contains("keep") && (*h)["keep"].is_number()) {
      const double k = (*h)["keep"].get<double>();
      if (k > 0 && k <= 1) s.keep = k;
    }
    if (h->contains("prune") && (*h)["prune"].is_number()) s.prune = std::max(1.0, (*h)["prune"].get<double>());
    if (h->contains("tiles") && (*h)["tiles"].is_number())
      s.tiles = std::clamp((*h)["tiles"].get<double>(), 0.0, 1.0);
    if (h->contains("priors") && (*h)["priors"].is_number_integer())
      s.priors = std::max(0, (*h)["priors"].get<int>());
    if (h->contains("budget_share") && (*h)["budget_share"].is_number())
      s.budget_share = std::clamp((*h)["budget_share"].get<double>(), 0.0, 1.0);
  }
  return s;
}

Plan next_round(const SearchSpace& space, const std::vector<const Principle*>& principles,
                const std::string& backend, const SearchSettings& settings,
                const std::vector<Evaluated>& history) {
  if (settings.strategy == "halving") return halving(space, principles, backend, settings, history);
  if (settings.strategy == "exhaustive" || settings.strategy == "random")
    return one_round(space.configs, principles, backend, settings.strategy, settings.max_candidates,
                     settings.seed);
  throw std::invalid_argument("unknown strategy '" + settings.strategy + "' (exhaustive, random, halving)");
}

std::optional<ConfigPrediction> predict_config(const Target& t, const std::string& dtype,
                                               const Traffic& traffic, const json& config,
                                               const json& hint) {
  if (t.memory_bandwidth_gbs <= 0 || t.compute_units <= 0) return std::nullopt;
  ConfigPrediction p;
  const double eb = element_bytes(dtype);
  int warps = 4;
  if (auto w = config.find("num_warps"); w != config.end() && w->is_number()) warps = std::max(1, w->get<int>());
  const int ws = std::max(1, t.warp_size);
  const double threads = static_cast<double>(warps) * ws;

  // The tile: BLOCK_* knobs; BLOCK_K is the reduction step, the others span the tile.
  double tile = 1, dims_sum = 0, inv_dims = 0;
  std::optional<double> bk;
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (it.key().rfind("BLOCK", 0) != 0 || !it->is_number()) continue;
    const double v = std::max(1.0, it->get<double>());
    if (it.key() == "BLOCK_K") {
      bk = v;
    } else {
      tile *= v;
      dims_sum += v;
      inv_dims += 1.0 / v;
    }
  }
  p.registers = kBaseRegisters + tile / threads + (bk ? dims_sum * *bk / threads * eb / 4.0 : 0.0);
  // A template that knows better says so (conv2d: BLOCK_P is walked, not held).
  if (auto r = positive_number(hint, "registers")) p.registers = *r;
  const double max_regs = max_registers_per_thread(t);
  p.spills = p.registers > max_regs;
  const double alloc = std::min(p.registers, max_regs);

  // Resident blocks per CU/SM: warp slots, shared memory, registers.
  const int simds = std::max(1, t.simds_per_cu);
  double bpc = std::floor(static_cast<double>(std::max(1, t.max_waves_per_simd) * simds) / warps);
  long long shared = 0;
  if (auto sb = positive_number(hint, "shared_bytes")) shared = static_cast<long long>(*sb);
  if (shared > 0 && t.lds_bytes_per_cu > 0)
    bpc = std::min(bpc, std::floor(static_cast<double>(t.lds_bytes_per_cu) / static_cast<double>(shared)));
  if (t.registers_per_cu > 0)
    bpc = std::min(bpc, std::floor(static_cast<double>(t.registers_per_cu) / (alloc * threads)));
  p.blocks_per_cu = std::max(1.0, bpc);

  // Waves and tail over the grid; no grid: assume exactly full rounds (no
  // tail term). The tail below is estimate.cpp's compute-bound one (an empty
  // slot of the last round is lost) for every kernel: estimate.cpp's
  // memory-bound tail (a partly filled last round streams at the latency
  // hiding its own blocks reach) is not modelled here.
  double blocks = p.blocks_per_cu * t.compute_units;
  if (hint.is_object())
    if (auto g = hint.find("grid"); g != hint.end() && g->is_array() && !g->empty()) {
      blocks = 1;
      for (size_t i = 0; i < 3 && i < g->size(); ++i)
        blocks *= std::max(1.0, (*g)[i].is_number() ? (*g)[i].get<double>() : 1.0);
    }
  const double slots = p.blocks_per_cu * t.compute_units;
  double stages = 1;
  if (auto ns = config.find("num_stages"); ns != config.end() && ns->is_number()) stages = ns->get<double>();
  // A grid of at least one full round: the last round may be partly empty
  // (tail), and a full round has blocks/CU resident blocks per CU. A grid
  // smaller than one round: only the CUs with a block work (estimate.cpp's
  // blocks / slots would count the empty slots of busy CUs twice, once here and
  // once in the hiding term).
  double tail, blocks_on_busy_cu;
  if (blocks >= slots) {
    const double rounds = std::ceil(blocks / slots);
    tail = blocks / (rounds * slots);
    blocks_on_busy_cu = p.blocks_per_cu;
  } else {
    const double busy_cus = std::min(blocks, static_cast<double>(t.compute_units));
    tail = busy_cus / t.compute_units;
    blocks_on_busy_cu = blocks / busy_cus;
  }
  // Latency hiding, as in estimate.cpp (two resident warps per SIMD hide memory
  // latency), except that a software pipeline of num_stages keeps num_stages - 1
  // tile loads of each warp in flight: a 4-warp GEMM block alone on an SM with 3
  // stages hides as much latency as 8 warps without a pipeline.
  const double resident = blocks_on_busy_cu * warps / simds;
  double hiding = std::min(1.0, resident * std::max(1.0, stages - 1) / kWavesToHideLatency);
  // Bytes in flight, where the template says how many bytes one program has
  // outstanding at a time (hint `bytes_in_flight`; the row kernels): by
  // Little's law an SM streams at most in_flight / latency, so the memory time
  // grows when the resident programs' loads cannot cover the SM's share of
  // the bandwidth for one memory latency. It replaces the warp-count hiding
  // term: one warp with 16 KiB in flight hides more than 16 with 1 KiB.
  if (auto b = positive_number(hint, "bytes_in_flight")) {
    const double latency_ns = positive_number(t.raw, "memory_latency_ns").value_or(kMemoryLatencyNs);
    const double need = t.memory_bandwidth_gbs * 1e9 / t.compute_units * latency_ns * 1e-9;
    p.memory_efficiency = std::clamp(blocks_on_busy_cu * *b / need, 1e-3, 1.0);
    hiding = 1.0;
  }
  p.utilisation = std::clamp(tail * hiding, 1e-3, 1.0);
  // Memory and compute time at full machine use: the static estimate's terms.
  KernelResources k;
  k.num_warps = warps;
  k.warp_size = ws;
  const Estimate est = estimate_latency(t, dtype, traffic, k);

  if (bk && traffic.flops > 0 && inv_dims > 0) {
    const double l2 = positive_number(t.raw, "l2_bandwidth_gbs").value_or(kL2OverHbm * t.memory_bandwidth_gbs);
    const double bytes = traffic.flops / 2.0 * eb * inv_dims;
    p.operand_ms = bytes / (l2 * 1e9 * kBandwidthEfficiency) * 1e3;
  }
  // Issue time, where the template estimates its instructions (hint
  // `instructions`: thread instructions in all; conv2d): one warp instruction
  // per cycle per SIMD / SM sub-partition at the boost clock. Added to the
  // memory time rather than hidden under it: in a kernel that streams its
  // output, a thread busy issuing address arithmetic and conversions is not
  // issuing loads and stores, and on the H200 the conv2d configs' measured
  // times follow memory + issue (0.128-0.28 ms) where max(memory, issue)
  // put all 42 at the memory floor (docs/performance.md).
  if (auto ins = positive_number(hint, "instructions"))
    if (auto clock_mhz = positive_number(t.raw, "boost_clock_mhz")) {
      const double issue_per_s = static_cast<double>(t.compute_units) * simds * *clock_mhz * 1e6;
      p.issue_ms = *ins / ws / issue_per_s * 1e3;
    }
  const double spill = p.spills ? std::pow(p.registers / max_regs, 3) : 1.0;
  p.ms = (std::max({est.memory_ms / p.memory_efficiency, est.compute_ms, p.operand_ms}) + p.issue_ms) /
             p.utilisation * spill +
         kLaunchMs;
  return p;
}

}  // namespace kiln
