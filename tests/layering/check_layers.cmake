# The dependency rule of docs/design.md as a test: a header under include/kdist/<folder>/ includes
# only its own folder and the folders below it. The layers, bottom to top:
#   core  <-  parallel, ops (side by side: neither includes the other)  <-  tensor  <-  strategy
#   <-  nn  <-  io
# Within nn/, the layers (nn/layers/) include neither the training step (nn/train/) nor the model:
# a layer hands its gradients back (kdist::Gradients) and knows nothing of how they are summed.
# Within core/, the static forms (axis, dim_spec, mesh, layout, layout_axes, pending_sum) do not include their run-time value forms
# (core/runtime_*): the value types convert from the static ones in their constructors.
# kdist/kdist.hpp (the umbrella) includes everything but io/ (io needs HDF5, an optional component).
# Outside parallel/ and io/detail/, no header calls MPI itself.
# A header that names Kokkos:: or Eigen:: includes <Kokkos_Core.hpp> / an Eigen header itself: the
# headers-alone build precompiles those two (tests/CMakeLists.txt), so it would not notice one that
# only got them by accident.
#   cmake -DKDIST_INCLUDE_DIR=<repo>/include -P check_layers.cmake
# Prints every include that points up (file, line, what it includes, what it may include) and fails.
cmake_minimum_required(VERSION 3.20)
if(NOT KDIST_INCLUDE_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DKDIST_INCLUDE_DIR=<repository>/include")
endif()

set(_layers core parallel ops tensor strategy nn io)
# What each layer may include besides itself.
set(_below_core "")
set(_below_parallel core)
set(_below_ops core)
set(_below_tensor core parallel ops)
set(_below_strategy core parallel ops tensor)
set(_below_nn core parallel ops tensor strategy)
set(_below_io core parallel ops tensor strategy nn)
set(_below_umbrella core parallel ops tensor strategy nn)

# The static forms, which must not include their run-time value forms (core/runtime_*).
set(_static_forms core/axis.hpp core/dim_spec.hpp core/mesh.hpp core/layout.hpp core/layout_axes.hpp
    core/pending_sum.hpp)

file(GLOB_RECURSE _headers RELATIVE ${KDIST_INCLUDE_DIR}/kdist ${KDIST_INCLUDE_DIR}/kdist/*.hpp)
set(_violations 0)
set(_checked 0)
foreach(_h IN LISTS _headers)
  if(_h STREQUAL "kdist.hpp")
    set(_own umbrella)
  else()
    string(REGEX MATCH "^[^/]+" _own "${_h}")
    if(_h STREQUAL _own OR NOT _own IN_LIST _layers)
      message(SEND_ERROR "include/kdist/${_h}: not in a layer folder (${_layers}); "
                         "move it into the folder of its layer (docs/design.md)")
      math(EXPR _violations "${_violations} + 1")
      continue()
    endif()
  endif()
  # MPI is called from parallel/ only (and io/'s HDF5 detail, which hands communicators to HDF5 and
  # watches its collectives): everything above calls kdist's collectives (blocking and non-blocking,
  # side by side in parallel/, as kokkos-comm has them), so every collective is watched and counted
  # in one place. A call is `MPI_Xxx(` on a line that is not a comment.
  set(_calls_mpi_checked TRUE)
  if(_h MATCHES "^parallel/" OR _h MATCHES "^io/detail/")
    set(_calls_mpi_checked FALSE)
  endif()
  # One list element per line: ';', '[' and ']' would split or join CMake list elements.
  file(READ ${KDIST_INCLUDE_DIR}/kdist/${_h} _text)
  string(REGEX REPLACE "[];[]" "_" _text "${_text}")
  string(REPLACE "\n" ";" _lines "${_text}")
  foreach(_library IN ITEMS "Kokkos|Kokkos_Core.hpp|Kokkos_" "Eigen|an Eigen header|(unsupported/)?Eigen/")
    string(REPLACE "|" ";" _library "${_library}")
    list(GET _library 0 _namespace)
    list(GET _library 1 _wanted)
    list(GET _library 2 _prefix)
    set(_first_use 0)
    set(_included FALSE)
    set(_n 0)
    foreach(_line IN LISTS _lines)
      math(EXPR _n "${_n} + 1")
      string(REGEX REPLACE "//.*" "" _code "${_line}")
      if(_code MATCHES "^[ \t]*#[ \t]*include[ \t]*<${_prefix}")
        set(_included TRUE)
      elseif(NOT _first_use AND _code MATCHES "(^|[^A-Za-z_:])${_namespace}::")
        set(_first_use ${_n})
      endif()
    endforeach()
    if(_first_use AND NOT _included)
      message(SEND_ERROR "include/kdist/${_h}:${_first_use}: names ${_namespace}:: but does not "
                         "include ${_wanted} itself; include it (what a header uses, it includes)")
      math(EXPR _violations "${_violations} + 1")
    endif()
  endforeach()
  set(_n 0)
  foreach(_line IN LISTS _lines)
    math(EXPR _n "${_n} + 1")
    if(_calls_mpi_checked AND NOT _line MATCHES "^[ \t]*//" AND
       _line MATCHES "(MPI_[A-Z][a-z][A-Za-z_]*)\\(")
      message(SEND_ERROR "include/kdist/${_h}:${_n}: calls ${CMAKE_MATCH_1} directly: MPI is "
                         "called from parallel/ only; use (or add there) a kdist collective")
      math(EXPR _violations "${_violations} + 1")
    endif()
    if(_line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]kdist/([^>\"]+)[>\"]")
      set(_target "${CMAKE_MATCH_1}")
      math(EXPR _checked "${_checked} + 1")
      string(REGEX MATCH "^[^/]+" _to "${_target}")
      if(NOT EXISTS ${KDIST_INCLUDE_DIR}/kdist/${_target})
        message(SEND_ERROR "include/kdist/${_h}:${_n}: includes <kdist/${_target}>, which does not exist")
        math(EXPR _violations "${_violations} + 1")
      elseif(_h IN_LIST _static_forms AND _target MATCHES "^core/runtime_")
        # The static forms do not depend on their value forms: the conversion is the value type's
        # constructor (mdspan's pattern), so a core header includes core/runtime_* only from one.
        message(SEND_ERROR "include/kdist/${_h}:${_n}: includes <kdist/${_target}>: a static core "
                           "type must not depend on its run-time value form; put the conversion in "
                           "the value type's constructor")
        math(EXPR _violations "${_violations} + 1")
      elseif(_h MATCHES "^nn/layers/" AND _target MATCHES "^nn/(train/|model\\.hpp)")
        message(SEND_ERROR "include/kdist/${_h}:${_n}: includes <kdist/${_target}>: a layer does "
                           "not reach into the training step; hand the gradients back through "
                           "kdist::Gradients (nn/gradients.hpp) and let the step sum them")
        math(EXPR _violations "${_violations} + 1")
      elseif(NOT _to STREQUAL _own AND NOT _to IN_LIST _below_${_own})
        message(SEND_ERROR "include/kdist/${_h}:${_n}: includes <kdist/${_target}>: '${_to}/' is not "
                           "below '${_own}/' (${_own}/ may include: ${_own} ${_below_${_own}})")
        math(EXPR _violations "${_violations} + 1")
      endif()
    endif()
  endforeach()
endforeach()
# The umbrella includes every public header of every layer but io/ (and no detail/ header).
set(_umbrella "")
if(EXISTS ${KDIST_INCLUDE_DIR}/kdist/kdist.hpp)
  file(STRINGS ${KDIST_INCLUDE_DIR}/kdist/kdist.hpp _umbrella REGEX "^#include <kdist/")
endif()
foreach(_h IN LISTS _headers)
  if(NOT _umbrella OR _h STREQUAL "kdist.hpp" OR _h MATCHES "(^|/)detail/" OR _h MATCHES "^io/")
    continue()
  endif()
  if(NOT "#include <kdist/${_h}>" IN_LIST _umbrella)
    message(SEND_ERROR "include/kdist/kdist.hpp does not include <kdist/${_h}>: the umbrella "
                       "includes every public header but io/'s")
    math(EXPR _violations "${_violations} + 1")
  endif()
endforeach()
foreach(_line IN LISTS _umbrella)
  if(_line MATCHES "<kdist/(io/|[^>]*detail/)")
    message(SEND_ERROR "include/kdist/kdist.hpp: ${_line}: the umbrella includes neither io/ (it "
                       "needs HDF5: kdist::io) nor detail/ headers")
    math(EXPR _violations "${_violations} + 1")
  endif()
endforeach()

list(LENGTH _headers _count)
if(_violations)
  message(FATAL_ERROR "kdist layering: ${_violations} include(s) or MPI call(s) break the layer rule")
endif()
message(STATUS "kdist layering: ${_count} headers, ${_checked} kdist includes, all point down")
