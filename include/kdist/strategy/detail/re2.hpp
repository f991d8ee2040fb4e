#pragma once
//! \file strategy/detail/re2.hpp
//! The one place kdist includes RE2 (LayoutMap's linear-time regex engine), so that every header
//! compiles in a user's `.cu` file.
//!
//! Why the guard below: nvcc's front end (EDG) rejects Debian's `<re2/re2.h>` (2022-06): the
//! variadic `RE2::FullMatch`/`PartialMatch`/`Consume`/`FindAndConsume` templates construct the
//! nested `RE2::Arg` before its definition, which GCC and clang accept and EDG does not
//! ("incomplete type re2::RE2::Arg is not allowed"). RE2's own SWIG mode leaves exactly those
//! convenience declarations (and `LazyRE2`) out and changes no data member or out-of-line
//! symbol, so a `.cu` translation unit sees the same RE2, RE2::Options and RE2::Set classes as a
//! `.cpp` one. kdist uses only what both modes declare: `RE2(StringPiece, Options)`,
//! `RE2::Match`, `RE2::Set`. (RE2's header ends with `using re2::LazyRE2;`, outside its SWIG
//! guard, hence the forward declaration.)

#if defined(__CUDACC__) && !defined(RE2_RE2_H_) && !defined(SWIG)
namespace re2 {
class LazyRE2;
}  // namespace re2
#define SWIG
#define KDIST_RE2_SWIG_MODE
#endif
#include <re2/re2.h>
#include <re2/set.h>
#ifdef KDIST_RE2_SWIG_MODE
#undef SWIG
#undef KDIST_RE2_SWIG_MODE
#endif

#include <string_view>

namespace kdist::detail {

//! Whether `re` matches the whole of `text` (Python's `re.fullmatch`), without captures; the
//! variadic `RE2::FullMatch` is not declared under nvcc (see above).
inline bool re2_full_match(std::string_view text, const re2::RE2& re) {
  return re.Match(re2::StringPiece(text.data(), text.size()), 0, text.size(), re2::RE2::ANCHOR_BOTH,
                  nullptr, 0);
}

}  // namespace kdist::detail
