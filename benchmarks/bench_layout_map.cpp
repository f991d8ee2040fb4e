// LayoutMap lookups: resolve 10,000 variable paths against 200 and 1,000 rules, with the workload
// of ../shared/anchors/keras_layoutmap.py (make_workload) reproduced exactly. The Python anchor
// (Keras' algorithm: exact key, then re.fullmatch over every key) is timed by
// benchmarks/layout_map_vs_keras.sh, which prints the ratio.
//
//   BM_LayoutMap_Cold       a fresh copy of the map (no RE2::Set, empty cache) resolving every
//                           path once: the anchor's situation (it compiles regexes on first use)
//   BM_LayoutMap_Uncached   every path resolved with the cache off: exact-key probe + RE2::Set
//   BM_LayoutMap_CachedFind warm cache, find(): a pointer to the stored layout
//   BM_LayoutMap_CachedGet  warm cache, get(): a std::optional copy of the layout
//   BM_LayoutMap_LoadJson   JSON text of N rules (layout_map_from_json) into a map over a 2x4 mesh:
//                           the workload's regex keys (/0) and per-variable exact paths (/1), 1,000
//                           and 100,000 rules; counters: rules/s and the resident memory it added
//                           (issue 35: 100,000 rules took 610 s and 631 MB; target < 1 s, 100 MB)
//   Baselines in the same binary: BM_Raw_Re2PerKey (RE2::FullMatch key by key, Keras' loop with
//   RE2), BM_Raw_UnorderedMapFind (a plain hash-map probe, the floor for a cached lookup).
#include <benchmark/benchmark.h>
#include <kdist/strategy/detail/re2.hpp>  // RE2, as kdist includes it (nvcc-safe)

#include <fstream>
#include <kdist/io/layout_map_file.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr std::size_t n_paths = 10000;

struct Workload {
  std::vector<std::string> rules;
  std::vector<std::string> paths;
};

//! make_workload(n_rules, n_paths) of keras_layoutmap.py, line for line.
Workload make_workload(std::size_t n_rules, std::size_t paths) {
  const std::vector<std::string> kinds{"attn/query/kernel", "attn/key/kernel", "attn/value/kernel",
                                       "attn/out/kernel",   "mlp/up/kernel",   "mlp/down/kernel",
                                       "mlp/up/bias",       "norm/gamma"};
  const std::size_t blocks = n_rules / kinds.size() + 1;
  Workload w;
  for (std::size_t b = 0; b < blocks && w.rules.size() < n_rules; ++b) {
    for (const auto& k : kinds) {
      if (w.rules.size() == n_rules) break;
      std::string r = "block_" + std::to_string(b) + "/" + k;
      // str.replace("/kernel", "/ker.*"): every occurrence
      for (std::size_t pos = r.find("/kernel"); pos != std::string::npos;
           pos = r.find("/kernel", pos + 6)) {
        r.replace(pos, 7, "/ker.*");
      }
      w.rules.push_back(".*" + r);
    }
  }
  for (std::size_t i = 0; i < paths; ++i) {
    w.paths.push_back("model/block_" + std::to_string(i % blocks) + "/" + kinds[i % kinds.size()]);
  }
  return w;
}

struct Fixture {
  Workload w;
  std::unique_ptr<kdist::LayoutMap<>> map;
  std::size_t expected_hits = 0;
};

//! The map of the workload: rule i -> a layout (the anchor stores i).
const Fixture& fixture(std::size_t n_rules) {
  static std::unordered_map<std::size_t, std::unique_ptr<Fixture>> cache;
  auto& f = cache[n_rules];
  if (!f) {
    f = std::make_unique<Fixture>();
    f->w = make_workload(n_rules, n_paths);
    kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, 8);
    f->map = std::make_unique<kdist::LayoutMap<>>(mesh);
    for (const auto& r : f->w.rules) f->map->insert(r, {kdist::replicated, "model"});
    for (const auto& p : f->w.paths) f->expected_hits += f->map->find(p) ? 1 : 0;
  }
  return *f;
}

void set_counters(benchmark::State& state, std::size_t hits, std::size_t expected) {
  if (hits != expected) state.SkipWithError("hit count differs from the first resolution");
  state.counters["lookup"] = benchmark::Counter(
      static_cast<double>(n_paths),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["hits"] = static_cast<double>(expected);
}

void BM_LayoutMap_Cold(benchmark::State& state) {
  const auto& f = fixture(static_cast<std::size_t>(state.range(0)));
  std::size_t hits = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto map = std::make_unique<kdist::LayoutMap<>>(*f.map);  // no Set, empty cache
    state.ResumeTiming();
    hits = 0;
    for (const auto& p : f.w.paths) hits += map->find(p) ? 1 : 0;
    benchmark::DoNotOptimize(hits);
    state.PauseTiming();
    map.reset();
    state.ResumeTiming();
  }
  set_counters(state, hits, f.expected_hits);
}

void BM_LayoutMap_Uncached(benchmark::State& state) {
  const auto& f = fixture(static_cast<std::size_t>(state.range(0)));
  kdist::LayoutMap map = *f.map;
  map.set_cache_capacity(0);
  std::size_t hits = 0;
  for (auto _ : state) {
    hits = 0;
    for (const auto& p : f.w.paths) hits += map.find(p) ? 1 : 0;
    benchmark::DoNotOptimize(hits);
  }
  set_counters(state, hits, f.expected_hits);
}

void BM_LayoutMap_CachedFind(benchmark::State& state) {
  const auto& f = fixture(static_cast<std::size_t>(state.range(0)));
  const kdist::LayoutMap<>& map = *f.map;  // warmed by fixture()
  std::size_t hits = 0;
  for (auto _ : state) {
    hits = 0;
    for (const auto& p : f.w.paths) hits += map.find(p) ? 1 : 0;
    benchmark::DoNotOptimize(hits);
  }
  set_counters(state, hits, f.expected_hits);
}

void BM_LayoutMap_CachedGet(benchmark::State& state) {
  const auto& f = fixture(static_cast<std::size_t>(state.range(0)));
  const kdist::LayoutMap<>& map = *f.map;
  std::size_t hits = 0;
  for (auto _ : state) {
    hits = 0;
    for (const auto& p : f.w.paths) {
      auto l = map.get(p);
      hits += l ? 1 : 0;
      benchmark::DoNotOptimize(l);
    }
  }
  set_counters(state, hits, f.expected_hits);
}

void BM_Raw_Re2PerKey(benchmark::State& state) {
  const auto& f = fixture(static_cast<std::size_t>(state.range(0)));
  std::vector<std::unique_ptr<RE2>> res;
  for (const auto& r : f.w.rules) res.push_back(std::make_unique<RE2>(r));
  std::size_t hits = 0;
  for (auto _ : state) {
    hits = 0;
    for (const auto& p : f.w.paths) {
      std::size_t matches = 0;
      for (const auto& re : res) matches += kdist::detail::re2_full_match(p, *re) ? 1 : 0;
      hits += matches == 1 ? 1 : 0;
    }
    benchmark::DoNotOptimize(hits);
  }
  set_counters(state, hits, f.expected_hits);
}

void BM_Raw_UnorderedMapFind(benchmark::State& state) {
  const auto& f = fixture(static_cast<std::size_t>(state.range(0)));
  std::unordered_map<std::string, std::size_t> m;
  for (const auto& p : f.w.paths) m.emplace(p, f.map->find(p) ? 1 : 0);
  std::size_t hits = 0;
  for (auto _ : state) {
    hits = 0;
    for (const auto& p : f.w.paths) hits += m.find(p)->second;
    benchmark::DoNotOptimize(hits);
  }
  set_counters(state, hits, f.expected_hits);
}

}  // namespace

// Wall-clock time (UseRealTime), as the Python anchor measures (time.perf_counter): the "lookup"
// counter is wall seconds per lookup.
//! Resident memory of this process in bytes (/proc/self/statm), 0 where there is none.
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  double resident = 0;
  statm >> pages >> resident;
  return resident * 4096.0;
}

void BM_LayoutMap_LoadJson(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool exact_paths = state.range(1) != 0;
  const Workload w = make_workload(n, exact_paths ? n : 0);
  const auto& keys = exact_paths ? w.paths : w.rules;
  std::string text = "{";
  for (std::size_t i = 0; i < n; ++i) {
    // unique exact paths: the workload's paths repeat once its blocks are used up
    const std::string key = exact_paths ? keys[i] + "_" + std::to_string(i) : keys[i];
    text += (i > 0 ? ",\n  \"" : "\n  \"") + key + "\": [null, \"model\"]";
  }
  text += "\n}\n";
  const kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, 8);
  double added = 0;
  for (auto _ : state) {
    const double before = resident_bytes();
    auto map = kdist::layout_map_from_json(text, mesh);
    added = resident_bytes() - before;
    if (map.size() != n) state.SkipWithError("not every rule was loaded");
    benchmark::DoNotOptimize(map);
  }
  state.counters["rules"] =
      benchmark::Counter(static_cast<double>(n * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["resident_MB"] = added / 1e6;
}

BENCHMARK(BM_LayoutMap_LoadJson)
    ->ArgsProduct({{1000, 100000}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);
BENCHMARK(BM_LayoutMap_Cold)->Arg(200)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LayoutMap_Uncached)->Arg(200)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LayoutMap_CachedFind)
    ->Arg(200)
    ->Arg(1000)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_LayoutMap_CachedGet)
    ->Arg(200)
    ->Arg(1000)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Raw_Re2PerKey)->Arg(200)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Raw_UnorderedMapFind)
    ->Arg(200)
    ->Arg(1000)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

BENCHMARK_MAIN();
