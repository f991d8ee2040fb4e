// Explicit template instantiation of kdist's model classes (a build option, as Kokkos Kernels'
// ETI): every translation unit of a program that trains a model otherwise compiles the same
// layers, AnyLayer holders, Sequential, train step and optimizer state on float and double again
// (about half of a test program's compile time, docs/design.md "Explicit instantiation").
//
// Defining KDIST_EXTERN_TEMPLATES declares those instances `extern template` where each class is
// defined (KDIST_EXTERN_LAYER / KDIST_EXTERN_CLASS at the end of its header), so a program's
// translation units take them from one library that defines them once (KDIST_INSTANTIATE_LAYER /
// KDIST_INSTANTIATE_CLASS; the project's kdist_instances, instances/CMakeLists.txt). Without it
// (the default for a program that includes kdist) nothing changes: kdist is header-only. Member
// templates (fit<R>, train<View>) and the free function templates are instantiated where used, as
// before. A translation unit that changes what kdist's headers compile (KDIST_CHECK_COLLECTIVES)
// keeps its own instances.
#pragma once

//! The scalar types kdist instantiates its model classes on: float, and double unless
//! KDIST_INSTANCES_OF_DOUBLE is 0 (the examples and benchmarks train float models only).
#if !defined(KDIST_INSTANCES_OF_DOUBLE) || KDIST_INSTANCES_OF_DOUBLE
#define KDIST_FOR_EACH_INSTANCE_SCALAR(F, how, name) F(float, how, name) F(double, how, name)
#define KDIST_DETAIL_FOR_EACH_SCALAR_AT(F, how, name, A) \
  F(float, how, name, A) F(double, how, name, A)
#else
#define KDIST_FOR_EACH_INSTANCE_SCALAR(F, how, name) F(float, how, name)
#define KDIST_DETAIL_FOR_EACH_SCALAR_AT(F, how, name, A) F(float, how, name, A)
#endif

#define KDIST_DETAIL_LAYER_INSTANCE(T, how, L) \
  how class kdist::layers::L<T>;               \
  how struct kdist::AnyLayer<T>::Model<kdist::layers::L<T>>;
#define KDIST_DETAIL_CLASS_INSTANCE(T, how, C) how class C<T>;
#define KDIST_DETAIL_LAYER_INSTANCE_AT(T, how, L, A) \
  how class kdist::layers::L<T, A>;                  \
  how struct kdist::AnyLayer<T>::Model<kdist::layers::L<T, A>>;

//! Layer class template kdist::layers::L on each scalar type, and AnyLayer's holder of it.
#define KDIST_INSTANTIATE_LAYER(L) \
  KDIST_FOR_EACH_INSTANCE_SCALAR(KDIST_DETAIL_LAYER_INSTANCE, template, L)
//! Layer class template kdist::layers::L<T, A> (a second argument A: a convolution's spatial
//! axes) on each scalar type, and AnyLayer's holder of it.
#define KDIST_INSTANTIATE_LAYER_AT(L, A) \
  KDIST_DETAIL_FOR_EACH_SCALAR_AT(KDIST_DETAIL_LAYER_INSTANCE_AT, template, L, A)
//! Class template C (fully qualified) on each scalar type.
#define KDIST_INSTANTIATE_CLASS(C) \
  KDIST_FOR_EACH_INSTANCE_SCALAR(KDIST_DETAIL_CLASS_INSTANCE, template, C)
#define KDIST_DETAIL_LOSS_INSTANCE(T, how, L) how struct kdist::AnyLoss<T>::Model<kdist::losses::L>;
//! AnyLoss's holder of the library's loss kdist::losses::L on each scalar type (what a program
//! that compiles with a loss by name builds).
#define KDIST_INSTANTIATE_LOSS(L) \
  KDIST_FOR_EACH_INSTANCE_SCALAR(KDIST_DETAIL_LOSS_INSTANCE, template, L)

//! Members of class templates that the class's explicit instantiation leaves out (member
//! templates, such as TrainStep::train on a targets type): F(T, how, A) spells them for the scalar
//! type T, the `how` of an instantiation and the argument A.
#define KDIST_INSTANTIATE_MEMBERS(F, A) KDIST_FOR_EACH_INSTANCE_SCALAR(F, template, A)

#if defined(KDIST_EXTERN_TEMPLATES) && !defined(KDIST_CHECK_COLLECTIVES)
#define KDIST_EXTERN_LAYER(L) \
  KDIST_FOR_EACH_INSTANCE_SCALAR(KDIST_DETAIL_LAYER_INSTANCE, extern template, L)
#define KDIST_EXTERN_LAYER_AT(L, A) \
  KDIST_DETAIL_FOR_EACH_SCALAR_AT(KDIST_DETAIL_LAYER_INSTANCE_AT, extern template, L, A)
#define KDIST_EXTERN_CLASS(C) \
  KDIST_FOR_EACH_INSTANCE_SCALAR(KDIST_DETAIL_CLASS_INSTANCE, extern template, C)
#define KDIST_EXTERN_LOSS(L) \
  KDIST_FOR_EACH_INSTANCE_SCALAR(KDIST_DETAIL_LOSS_INSTANCE, extern template, L)
#define KDIST_EXTERN_MEMBERS(F, A) KDIST_FOR_EACH_INSTANCE_SCALAR(F, extern template, A)
#else
#define KDIST_EXTERN_LAYER(L)
#define KDIST_EXTERN_LAYER_AT(L, A)
#define KDIST_EXTERN_CLASS(C)
#define KDIST_EXTERN_LOSS(L)
#define KDIST_EXTERN_MEMBERS(F, A)
#endif
