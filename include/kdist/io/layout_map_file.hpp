#pragma once
//! \file io/layout_map_file.hpp
//! LayoutMap rules in a JSON file, so that changing a sharding needs no recompiling:
//! `kdist::read_layout_map(file, mesh)` (or into an existing, typed, map: `read_layout_map(file,
//! layout_map)`) and `kdist::write_layout_map(map, file)`, with `layout_map_from_json` /
//! `layout_map_to_json` on strings.
//!
//! The format is Keras' LayoutMap as a JSON object, one rule per key, in order:
//! \code{.json}
//! {
//!   "dense.*kernel": [null, "model"],
//!   "dense.*bias":   ["model"],
//!   "token_embedding/embeddings": ["model", ["data", "seq"]]
//! }
//! \endcode
//! Each value lists one entry per dimension: a mesh axis name, `null` (replicated, Keras'
//! None), or an array of axis names (the dimension sharded over several axes, outermost first).
//! Keys are RE2 regular expressions matched as `RuntimeLayoutMap` matches them.
//!
//! Errors (`kdist::ValueError`, naming the file, the rule and what is wrong): a file that cannot
//! be read, text that is not JSON (with the position), a top level that is not an object, a key
//! given twice, a value that is not an array of dimensions, an entry that is not a name, `null` or
//! an array of names, an empty name, and what `RuntimeLayoutMap::insert` rejects (an axis the mesh
//! does not have, an invalid regex). `read_layout_map` is collective over kdist::communicator():
//! process 0 reads the file and sends its text to the others, so every process gets the same
//! rules or the same error.

#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <kdist/core/error.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/world.hpp>
#include <kdist/strategy/runtime_layout_map.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace kdist {

namespace detail {

inline std::string rule_context(std::string_view source, std::string_view key) {
  return std::string(source) + ": rule \"" + std::string(key) + "\"";
}

//! One dimension's entry: "axis", null, or ["axis", ...].
inline DimAxes dim_from_json(const nlohmann::json& entry, std::string_view source,
                             std::string_view key, std::size_t dim) {
  const std::string where = rule_context(source, key) + ", dimension " + std::to_string(dim);
  const auto name_of = [&](const nlohmann::json& e) {
    if (!e.is_string()) {
      throw ValueError(where + ": " + e.dump() +
                       " is not a mesh axis name; write \"axis\", null (replicated) or "
                       "[\"axis\", ...] (several axes)");
    }
    auto name = e.get<std::string>();
    if (name.empty()) throw ValueError(where + ": an axis name is empty");
    return name;
  };
  if (entry.is_null()) return DimAxes(std::nullopt);
  if (entry.is_string()) return DimAxes(name_of(entry));
  if (entry.is_array()) {
    std::vector<std::string> names;
    for (const auto& e : entry) names.push_back(name_of(e));
    if (names.empty()) return DimAxes(std::nullopt);  // [] shards over no axis: replicated
    return DimAxes(std::move(names));
  }
  return DimAxes(name_of(entry));  // throws: a number, a bool or an object
}

}  // namespace detail

//! Adds the rules of JSON text (the format in the file comment), in order, to `map` (a
//! RuntimeLayoutMap or a typed LayoutMap<Mesh>: each rule is checked against its mesh).
//! `source` names the text in errors (a file name). On an error no rule of the text is added.
inline void layout_map_from_json(std::string_view text, RuntimeLayoutMap& into,
                                 std::string_view source = "<layout map JSON>") {
  // Each rule is converted as the parser completes it, and its JSON value is then dropped (the
  // parser callback returns false): no tree of the whole file is kept (100,000 rules would hold
  // ~25 MB of it), the rules keep the file's order, and a key given twice (which JSON would
  // silently resolve to the last value) is found. (nlohmann's ordered_json also searches its keys
  // linearly on every insert: 100,000 rules took minutes.) The errors come in the order they did
  // when the file was read whole: not JSON, not an object, a key twice, then rule by rule.
  using Json = nlohmann::json;
  struct Rule {
    std::string key;
    std::vector<DimAxes> axes;
    std::string problem;  // what is wrong with its value, if anything
  };
  std::vector<Rule> rules;
  std::set<std::string, std::less<>> keys;
  std::string repeated;
  bool top_is_object = false;
  const Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    if (depth == 0 && event == Event::object_start) top_is_object = true;
    if (!top_is_object || depth != 1) return true;
    if (event == Event::key) {
      auto key = parsed.get<std::string>();
      if (!keys.insert(key).second && repeated.empty()) repeated = key;
      rules.push_back({std::move(key), {}, {}});
      return true;
    }
    if (event != Event::array_end && event != Event::object_end && event != Event::value) {
      return true;  // the start of a rule's value
    }
    Rule& rule = rules.back();  // its value is complete
    try {
      if (!parsed.is_array()) {
        throw ValueError(detail::rule_context(source, rule.key) + ": the value " + parsed.dump() +
                         " is not an array with one entry per dimension, such as [null, "
                         "\"model\"]");
      }
      for (std::size_t d = 0; d < parsed.size(); ++d)
        rule.axes.push_back(detail::dim_from_json(parsed[d], source, rule.key, d));
    } catch (const ValueError& e) {
      rule.problem = e.what();
    }
    return false;  // converted: not kept in the tree
  };
  Json document;
  try {
    document = Json::parse(text.begin(), text.end(), on_event);
  } catch (const Json::parse_error& e) {
    throw ValueError(std::string(source) + ": not valid JSON (byte " + std::to_string(e.byte) +
                     "): " + e.what() +
                     "; a LayoutMap file is an object {\"regex\": [\"axis\" | null, ...], ...}");
  }
  if (!document.is_object()) {
    throw ValueError(std::string(source) + ": the top level is " +
                     std::string(document.type_name()) +
                     ", not an object; write {\"regex\": [\"axis\" | null, ...], ...}");
  }
  if (!repeated.empty()) {
    throw ValueError(detail::rule_context(source, repeated) +
                     " is given twice; each regex may appear once (merge the two)");
  }
  RuntimeLayoutMap map(into.device_mesh());  // all rules checked before any reaches `into`
  for (auto& rule : rules) {
    if (!rule.problem.empty()) throw ValueError(rule.problem);
    try {
      map.insert(rule.key, std::move(rule.axes));
    } catch (const ValueError& e) {
      throw ValueError(detail::rule_context(source, rule.key) + ": " + e.what());
    }
  }
  for (const auto& [key, layout] : map) {
    if (into.contains(key)) {
      throw ValueError(detail::rule_context(source, key) +
                       ": this key already exists in the LayoutMap with value " +
                       into.at(key).to_string() + "; no rule of " + std::string(source) +
                       " was added (drop one of the two)");
    }
  }
  into.insert_all(std::move(map));
}

//! A map over `mesh` (none: layouts without a mesh) with the rules of JSON text.
inline RuntimeLayoutMap layout_map_from_json(std::string_view text,
                                             std::optional<RuntimeDeviceMesh> mesh = {},
                                             std::string_view source = "<layout map JSON>") {
  RuntimeLayoutMap map(std::move(mesh));
  layout_map_from_json(text, map, source);
  return map;
}

//! The rules of `map` as JSON text in this format, one rule per line in insertion order
//! (`"dense.*kernel": [null, "model"],`): `layout_map_from_json(layout_map_to_json(m), mesh)`
//! gives the same rules.
inline std::string layout_map_to_json(const RuntimeLayoutMap& map) {
  using Json = nlohmann::ordered_json;
  std::string out = "{";
  bool first = true;
  for (const auto& [key, layout] : map) {
    // One entry per dimension: null, "axis" or ["axis", "axis"], separated by ", ".
    const auto names = [](const std::vector<std::string>& axes) {
      std::string text;
      for (const auto& a : axes) text += (text.empty() ? "" : ", ") + Json(a).dump();
      return text;
    };
    std::string spaced = "[";
    for (std::size_t d = 0; d < layout.axes().size(); ++d) {
      const auto& axes = layout.axes()[d].names();
      if (d > 0) spaced += ", ";
      spaced += axes.empty() ? "null" : axes.size() == 1 ? names(axes) : "[" + names(axes) + "]";
    }
    spaced += "]";
    out += std::string(first ? "\n" : ",\n") + "  " + Json(key).dump() + ": " + spaced;
    first = false;
  }
  return out + (first ? "}\n" : "\n}\n");
}

//! Adds the rules of JSON file `file` to `map` (a RuntimeLayoutMap or a typed LayoutMap<Mesh>).
//! Collective over kdist::communicator(): process 0 reads, every process parses the same text and so
//! gets the same rules or the same error.
inline void read_layout_map(const std::filesystem::path& file, RuntimeLayoutMap& into) {
  const int rank = kdist::process_id();
  std::string text;
  std::string failure;
  if (rank == 0) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      failure = file.string() + ": cannot open this LayoutMap file (" +
                (std::filesystem::exists(file) ? "not readable" : "no such file") +
                "); give the path of a JSON file of rules";
    } else {
      std::ostringstream all;
      all << in.rdbuf();
      text = all.str();
    }
  }
  mpi::agree(kdist::communicator(), failure.empty(), failure);
  broadcast(text, 0, kdist::communicator());
  layout_map_from_json(text, into, file.string());
}

//! A map over `mesh` with the rules of JSON file `file` (collective, as above).
inline RuntimeLayoutMap read_layout_map(const std::filesystem::path& file,
                                        std::optional<RuntimeDeviceMesh> mesh = {}) {
  RuntimeLayoutMap map(std::move(mesh));
  read_layout_map(file, map);
  return map;
}

//! Writes the rules of `map` to `file` (process 0 only writes; collective over kdist::communicator(),
//! every process gets the same error if the file cannot be written).
inline void write_layout_map(const RuntimeLayoutMap& map, const std::filesystem::path& file) {
  const int rank = kdist::process_id();
  std::string failure;
  if (rank == 0) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << layout_map_to_json(map);
    out.flush();
    if (!out) failure = file.string() + ": cannot write this LayoutMap file";
  }
  mpi::agree(kdist::communicator(), failure.empty(), failure);
}

}  // namespace kdist
