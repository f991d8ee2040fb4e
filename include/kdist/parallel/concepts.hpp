#pragma once
//! \file parallel/concepts.hpp
//! The concepts of kdist's public signatures that name Kokkos and MPI types, spelled as
//! kokkos-comm spells them: `template <KokkosExecutionSpace Space, KokkosView View,
//! MpiCommunicator Comm> void all_reduce(const Space&, const View&, ReduceOp, const Comm&)`.
//! (The std-only ones are in kdist/core/concepts.hpp.)
//!
//! A concept says which overload a call picks; what a picked call gets wrong (a value type with
//! no MPI datatype, a const recv View) stays a kdist diagnostic, a static_assert naming it.

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <concepts>
#include <kdist/parallel/mpi/communicator.hpp>

namespace kdist {

//! A `Kokkos::View` of any data type, layout and memory space.
template <class T>
concept KokkosView = Kokkos::is_view<T>::value;

//! A Kokkos execution space instance's type (`Kokkos::DefaultExecutionSpace`, `Kokkos::Serial`).
template <class T>
concept KokkosExecutionSpace = Kokkos::is_execution_space<T>::value;

//! What kdist's collectives communicate over: a `kdist::mpi::Communicator` (for example
//! `MeshCommunicators::comm("model")`) or a raw `MPI_Comm`.
template <class T>
concept MpiCommunicator = std::same_as<T, MPI_Comm> || std::same_as<T, mpi::Communicator>;

}  // namespace kdist
