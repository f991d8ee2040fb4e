# Repair Debian's Kokkos 3.4.1 CMake config (libtrilinos-kokkos-dev), whose imported target
# Kokkos::kokkos names a non-existent include directory (/usr/lib/include) while the headers live
# in Kokkos_INCLUDE_DIRS (/usr/include/trilinos). CMake refuses to generate a build with a missing
# imported include directory, so every consumer would fail. The repair touches the target only
# when one of its include directories does not exist: a correct Kokkos 4.x install is untouched.
function(kdist_repair_kokkos_target)
  if(NOT TARGET Kokkos::kokkos)
    return()
  endif()
  get_target_property(_aliased Kokkos::kokkos ALIASED_TARGET)
  if(_aliased)
    return() # an in-tree Kokkos (add_subdirectory): nothing imported to repair
  endif()
  get_target_property(_dirs Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _dirs)
    return()
  endif()
  set(_kept "")
  set(_broken FALSE)
  foreach(_d IN LISTS _dirs)
    if(_d MATCHES "^\\$<" OR EXISTS "${_d}")
      list(APPEND _kept "${_d}")
    else()
      set(_broken TRUE)
    endif()
  endforeach()
  if(NOT _broken)
    return()
  endif()
  foreach(_d IN LISTS Kokkos_INCLUDE_DIRS)
    if(EXISTS "${_d}")
      list(APPEND _kept "${_d}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _kept)
  if(NOT _kept)
    message(FATAL_ERROR "kdist: Kokkos::kokkos names include directories that do not exist (${_dirs}) "
                        "and Kokkos_INCLUDE_DIRS (${Kokkos_INCLUDE_DIRS}) gives none that do. "
                        "Reinstall Kokkos (Debian: apt-get install --reinstall libtrilinos-kokkos-dev).")
  endif()
  set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_kept}")
  # Kokkos' headers are third-party: mark them SYSTEM so C++20 deprecation warnings in
  # Kokkos 3.4 do not drown the project's own warnings.
  set_property(TARGET Kokkos::kokkos PROPERTY INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_kept}")
  message(STATUS "kdist: repaired Kokkos::kokkos include directories: ${_dirs} -> ${_kept}")
endfunction()
