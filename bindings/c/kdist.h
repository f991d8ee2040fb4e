/* kdist's C API (issue 39): kdist for C and Fortran codes, compiled once into libkdist_c (callers
 * compile none of kdist's templates). A model comes from a Keras model file (.keras) or Keras'
 * JSON (model.to_json() of a compiled model), is distributed as a kdist distribution says
 * (DataParallel; ModelParallel over a mesh with LayoutMap rules in JSON: tensor parallelism, or
 * FSDP with rules that shard weights on the batch axis), and trains and predicts on the caller's
 * arrays. docs/guide/09-c-and-fortran.md is the guide; bindings/fortran/kdist.f90 the Fortran module over it.
 *
 *   kdist_initialize(MPI_COMM_WORLD);                    // MPI started by the caller
 *   kdist_distribution dist;  kdist_data_parallel(&dist);
 *   kdist_model model;        kdist_model_load("surrogate.keras", dist, 1337, &model);
 *   int64_t shape[2] = {rows, features};
 *   double loss;
 *   kdist_model_train_step(model, x, 2, shape, y, 2, target_shape, global_batch,
 *                          KDIST_MEMORY_HOST, &loss);
 *   kdist_model_free(model); kdist_distribution_free(dist); kdist_finalize();
 *
 * Every function returns a kdist_status: KDIST_OK, or an error whose message (what was wrong and
 * how to fix it, as kdist's C++ errors say it) kdist_last_error() returns until this thread's next
 * call. Functions marked collective are called by every process of kdist's communicator in the same
 * order; their errors from bad input are the same on every process (kdist agrees on them), so no
 * process is left waiting.
 *
 * Arrays are C's row-major order, shapes as Keras writes them: the batch first ((rows, features),
 * (rows, height, width, channels), ...). Each process passes its rows of the global batch, the
 * distribution's data layout (kdist_model_input_rows). A Fortran array x(features, rows) is the
 * same memory: the Fortran module reverses the shapes, and nothing is copied. */
#ifndef KDIST_H
#define KDIST_H

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default) /* libkdist_c exports these alone */
#endif

/* Keep in step with bindings/fortran/kdist.f90. */
typedef enum kdist_status {
  KDIST_OK = 0,
  KDIST_VALUE_ERROR = 1,      /* bad input (kdist::ValueError): a shape, a file, a config */
  KDIST_RUNTIME_ERROR = 2,    /* kdist::RuntimeError: MPI, I/O, the processes disagree */
  KDIST_INVALID_ARGUMENT = 3, /* a null handle or pointer, a negative extent or rank */
  KDIST_NOT_INITIALIZED = 4,  /* kdist_initialize was not called (or kdist_finalize was) */
  KDIST_INTERNAL_ERROR = 5    /* anything else: a bug, please report it with the message */
} kdist_status;

/* Where an array lives (the `memory` arguments, an int holding one of these): host memory, or the
 * memory of kdist's device (a GPU's, taken in place: no copy; on a CPU build the host's). A host
 * array given to a GPU build is copied to the device. */
typedef enum kdist_memory { KDIST_MEMORY_HOST = 0, KDIST_MEMORY_DEVICE = 1 } kdist_memory;

typedef struct kdist_distribution_s* kdist_distribution;
typedef struct kdist_model_s* kdist_model;

/* The message of this thread's last failed call ("" after a call that succeeded). */
const char* kdist_last_error(void);

/* Starts kdist (and Kokkos, if the caller has not) on the caller's communicator `comm`: kdist's
 * collectives, meshes, checkpoints and error reports stay within it. MPI must be initialised by the
 * caller (MPI_THREAD_MULTIPLE is best). Collective over `comm`. */
int kdist_initialize(MPI_Comm comm);
/* The same from Fortran's handle of a communicator (MPI_Comm_f2c). */
int kdist_initialize_fortran(MPI_Fint comm);
/* Frees every model and distribution not freed yet and ends kdist on its communicator (before
 * the caller's MPI_Finalize); kdist_initialize may start it again, on any communicator. Kokkos,
 * when kdist_initialize started it, runs until the program exits. Collective. */
int kdist_finalize(void);
/* This process's rank in kdist's communicator, and its size. */
int kdist_process_id(int* id);
int kdist_process_count(int* count);

/* Keras' DataParallel over every process of kdist's communicator. */
int kdist_data_parallel(kdist_distribution* out);
/* Keras' ModelParallel: a mesh of `mesh_rank` axes of `mesh_shape` extents named by
 * `axis_names` (comma-separated: "batch,model"), over every process, with LayoutMap rules in
 * JSON (docs/layout_maps.md: {"dense.*kernel": [null, "model"]}), the batch on axis
 * `batch_dim_name` (NULL or "": the first). FSDP is rules that shard weights on the batch axis. */
int kdist_model_parallel(int mesh_rank, const int64_t* mesh_shape, const char* axis_names,
                         const char* layout_map_json, const char* batch_dim_name,
                         kdist_distribution* out);
/* Frees a distribution (the models built on it keep their own reference). NULL: nothing. */
int kdist_distribution_free(kdist_distribution dist);

/* The model of Keras model file `path` (keras.Model.save("x.keras")), compiled with the file's
 * optimizer and loss on `dist`, holding its weights and optimizer state; `seed`: dropout's and
 * shuffling's (what Keras does not keep). Collective. */
int kdist_model_load(const char* path, kdist_distribution dist, uint64_t seed, kdist_model* out);
/* The model of Keras' JSON (model.to_json() of a compiled model, or kdist_model_to_json):
 * compiled with its compile_config on `dist`, its weights initialised from `seed`. Collective. */
int kdist_model_from_json(const char* json, kdist_distribution dist, uint64_t seed,
                          kdist_model* out);
/* Frees a model. NULL: nothing. */
int kdist_model_free(kdist_model model);

/* The shape of one example of the model's input (Keras' input_shape without the batch): `rank`
 * extents written to `shape` (room for `capacity`). */
int kdist_model_input_shape(kdist_model model, int64_t* shape, int capacity, int* rank);
/* The number of values of one example's output (the product of its shape). */
int kdist_model_output_size(kdist_model model, int64_t* size);
/* This process's rows of a global batch of `global_batch` examples under the distribution's data
 * layout: `first` and `count` (processes of one model replica share theirs). */
int kdist_model_input_rows(kdist_model model, int64_t global_batch, int64_t* first, int64_t* count);

/* One training step (Keras' train_on_batch) on this process's rows: `x` of `x_rank` extents
 * `x_shape` (rows first), targets `y` of `y_rank` extents `y_shape` (rows first; the rest hold
 * one example's output values, in row-major order); `global_batch`: the rows of every model
 * replica together. Writes the global mean loss, the same on every process. Collective. */
int kdist_model_train_step(kdist_model model, const float* x, int x_rank, const int64_t* x_shape,
                           const float* y, int y_rank, const int64_t* y_shape, int64_t global_batch,
                           int memory, double* loss);
/* The same with integer class labels (sparse_categorical_crossentropy), one per row: writes the
 * loss and the accuracy (NULL: not wanted). Collective. */
int kdist_model_train_step_labels(kdist_model model, const float* x, int x_rank,
                                  const int64_t* x_shape, const int32_t* labels,
                                  int64_t global_batch, int memory, double* loss, double* accuracy);
/* The loss on this process's rows without dropout or update (Keras' test_on_batch). */
int kdist_model_test_step(kdist_model model, const float* x, int x_rank, const int64_t* x_shape,
                          const float* y, int y_rank, const int64_t* y_shape, int64_t global_batch,
                          int memory, double* loss);
/* The model's output for this process's rows (Keras' predict_on_batch): rows x
 * kdist_model_output_size values written to `out` (room for `out_size` floats, in `memory`).
 * Collective. */
int kdist_model_predict(kdist_model model, const float* x, int x_rank, const int64_t* x_shape,
                        int64_t global_batch, int memory, float* out, int64_t out_size);

/* Keras model file `path` (.keras: keras.saving.load_model reads it). Collective. */
int kdist_model_save(kdist_model model, const char* path);
/* Keras weights file (.weights.h5, with the optimizer's state: Keras' save_weights/load_weights).
 * Collective. */
int kdist_model_save_weights(kdist_model model, const char* path);
int kdist_model_load_weights(kdist_model model, const char* path);
/* kdist's sharded, checksummed checkpoint (docs/checkpoints.md): every variable, the optimizer's
 * state, the step counter. Collective. */
int kdist_model_save_checkpoint(kdist_model model, const char* path);
int kdist_model_load_checkpoint(kdist_model model, const char* path);
/* Keras' model.to_json() of the model: `length` is its size (without the final '\0'); the text
 * is written to `buffer` when `capacity` exceeds it (call once with capacity 0 for the size). */
int kdist_model_to_json(kdist_model model, char* buffer, int64_t capacity, int64_t* length);
/* The optimizer's step counter (Keras' optimizer.iterations), and its learning rate's setter. */
int kdist_model_iterations(kdist_model model, int64_t* iterations);
int kdist_model_set_learning_rate(kdist_model model, double learning_rate);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif

#endif /* KDIST_H */
