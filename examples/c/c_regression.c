/* kdist from C (issue 39; bindings/c/kdist.h, docs/guide/09-c-and-fortran.md): a C code trains a model
 * designed in Keras - given as a Keras model file (--model x.keras) or, by default, as Keras' JSON
 * below - on data it holds itself, each process its rows of every global batch, then predicts,
 * and writes the trained model as a Keras file and a kdist checkpoint.
 *
 * The task: y = (sin(x0 + x1), x2 * x3) for x uniform in [-1, 1]^4, batches of 64. With
 * --model-parallel the first layer's kernel is sharded over a "model" axis of every process
 * (ModelParallel over a (1, P) mesh by a LayoutMap rule), otherwise DataParallel.
 *
 *   mpiexec -n 2 build/examples/c_regression --steps 300 --out c_regression_out
 *   mpiexec -n 2 build/examples/c_regression --model-parallel */
#include <kdist.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* model_json =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"c_regression\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4]}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 64, "
    "\"activation\": \"relu\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense_1\", \"units\": 2}}]},"
    "\"compile_config\": {\"optimizer\": {\"class_name\": \"Adam\", \"config\": "
    "{\"learning_rate\": 0.005}}, \"loss\": \"mean_squared_error\"}}";

enum { features = 4, outputs = 2, global_batch = 64 };
static int rank = 0;

/* Ends the job with kdist's message when a call fails (a collective call's error from bad input is
 * the same on every process, so each stops here). */
static void check(int status) {
  if (status != KDIST_OK) {
    fprintf(stderr, "error: process %d: %s\n", rank, kdist_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Example `i` of step `step` (the same on every process, whatever the split). */
static void example(int64_t step, int64_t i, float* x, float* y) {
  uint64_t h = (uint64_t)(step * global_batch + i) * 0x9E3779B97F4A7C15ull + 1;
  for (int j = 0; j < features; ++j) {
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    x[j] = (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  y[0] = sinf(x[0] + x[1]);
  y[1] = x[2] * x[3];
}

int main(int argc, char** argv) {
  int provided = 0, processes = 1, model_parallel = 0;
  int64_t steps = 300;
  const char *model_path = NULL, *out = NULL;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--steps") == 0 && a + 1 < argc) {
      steps = atoll(argv[++a]);
    } else if (strcmp(argv[a], "--model") == 0 && a + 1 < argc) {
      model_path = argv[++a];
    } else if (strcmp(argv[a], "--out") == 0 && a + 1 < argc) {
      out = argv[++a];
    } else if (strcmp(argv[a], "--model-parallel") == 0) {
      model_parallel = 1;
    } else {
      if (rank == 0) {
        fprintf(stderr,
                "error: unknown option '%s'; give --steps N, --model FILE.keras, "
                "--out DIR, --model-parallel\n",
                argv[a]);
      }
      MPI_Finalize();
      return 1;
    }
  }

  check(kdist_initialize(MPI_COMM_WORLD));
  kdist_distribution dist = NULL;
  if (model_parallel) {
    const int64_t mesh[2] = {1, processes};
    check(kdist_model_parallel(2, mesh, "batch,model",
                               "{\"dense/kernel\": [null, \"model\"], \"dense/bias\": [\"model\"]}",
                               "batch", &dist));
  } else {
    check(kdist_data_parallel(&dist));
  }
  kdist_model model = NULL;
  if (model_path != NULL) {
    check(kdist_model_load(model_path, dist, 1337, &model));
  } else {
    check(kdist_model_from_json(model_json, dist, 1337, &model));
  }

  /* this process's rows of each global batch, in arrays the code owns */
  int64_t first = 0, rows = 0;
  check(kdist_model_input_rows(model, global_batch, &first, &rows));
  float* x = malloc(sizeof(float) * (size_t)(rows * features + 1));
  float* y = malloc(sizeof(float) * (size_t)(rows * outputs + 1));
  float* p = malloc(sizeof(float) * (size_t)(rows * outputs + 1));
  const int64_t x_shape[2] = {rows, features}, y_shape[2] = {rows, outputs};
  double loss = 0, first_loss = 0;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < rows; ++i) example(s, first + i, x + i * features, y + i * outputs);
    check(kdist_model_train_step(model, x, 2, x_shape, y, 2, y_shape, global_batch,
                                 KDIST_MEMORY_HOST, &loss));
    if (s == 0) first_loss = loss;
    if (rank == 0 && (s + 1) % 100 == 0) printf("step %lld: loss %.6f\n", (long long)(s + 1), loss);
  }

  /* a batch never trained on: the model's error against predicting zeros */
  double errors[3] = {0, 0,
                      (double)(rows * outputs)}; /* rows shared by a replica count each time */
  for (int64_t i = 0; i < rows; ++i) example(-1, first + i, x + i * features, y + i * outputs);
  check(kdist_model_predict(model, x, 2, x_shape, global_batch, KDIST_MEMORY_HOST, p,
                            rows * outputs));
  for (int64_t k = 0; k < rows * outputs; ++k) {
    errors[0] += (p[k] - y[k]) * (p[k] - y[k]);
    errors[1] += y[k] * y[k];
  }
  MPI_Allreduce(MPI_IN_PLACE, errors, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("%s on %d processes: loss first %.6f, last %.6f\n",
           model_parallel ? "ModelParallel" : "DataParallel", processes, first_loss, loss);
    printf("held-out mean squared error %.6f (zeros: %.6f)\n", errors[0] / errors[2],
           errors[1] / errors[2]);
  }
  if (out != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s.keras", out);
    check(kdist_model_save(model, path));
    snprintf(path, sizeof path, "%s_checkpoint", out);
    check(kdist_model_save_checkpoint(model, path));
    if (rank == 0) printf("Saved %s.keras and %s_checkpoint\n", out, out);
  }
  free(x);
  free(y);
  free(p);
  check(kdist_finalize());
  MPI_Finalize();
  return errors[0] < 0.25 * errors[1] ? 0 : 1;
}
