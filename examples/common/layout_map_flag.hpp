#pragma once
//! The trainers' `--layout-map FILE`: LayoutMap rules from a JSON file through
//! kdist/io/layout_map_file.hpp, which needs nlohmann-json (Debian: nlohmann-json3-dev). A build
//! machine without it (the staged GPU machine) still builds the trainers; the flag then ends the
//! run with an error that says what is missing.
#include <kdist/core/error.hpp>
#include <kdist/strategy/runtime_layout_map.hpp>
#include <string>

#if __has_include(<nlohmann/json.hpp>)
#include <kdist/io/layout_map_file.hpp>
#endif

namespace kdist::examples {

//! Adds the rules of JSON file `file` to `map` (a typed LayoutMap<Mesh> or a RuntimeLayoutMap).
inline void read_layout_map_flag(const std::string& file, RuntimeLayoutMap& map) {
#if __has_include(<nlohmann/json.hpp>)
  kdist::read_layout_map(file, map);
#else
  (void)map;
  throw ValueError("--layout-map " + file +
                   ": this build has no JSON reader (nlohmann-json; Debian: nlohmann-json3-dev); "
                   "install it and rebuild, or drop the flag to use the trainer's own rules");
#endif
}

}  // namespace kdist::examples
