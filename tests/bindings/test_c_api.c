/* kdist's C API (bindings/c/kdist.h) from C, under mpiexec: starting on the caller's
 * communicator, Keras model files' predictions against Keras' own (tests/data: a CNN, a GPT), training from
 * Keras JSON, the files (.keras, .weights.h5, checkpoints) read back, ModelParallel against
 * DataParallel, and each error path's status and message.
 *
 *   mpiexec -n 2 test_c_api <tests/data> <a scratch directory shared by the processes> */
#include <kdist.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = 0;
static int failures = 0;

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "[%d] %s:%d: CHECK(%s) failed; kdist_last_error: %s\n", rank, __FILE__, \
              __LINE__, #cond, kdist_last_error());                                           \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)
/* A call that must succeed. */
#define OK(call) CHECK((call) == KDIST_OK)
/* A call that must fail with `status` and a message containing `text`. */
#define FAILS(call, status, text)                                                        \
  do {                                                                                   \
    const int got_ = (call);                                                             \
    CHECK(got_ == (status));                                                             \
    if (strstr(kdist_last_error(), (text)) == NULL) {                                    \
      fprintf(stderr, "[%d] %s:%d: message '%s' lacks '%s'\n", rank, __FILE__, __LINE__, \
              kdist_last_error(), (text));                                               \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

/* Keras' JSON of a compiled regression model: 4 features -> Dense(8, relu) -> Dense(2). */
static const char* regression_json =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"sequential\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4]}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 8, \"activation\": "
    "\"relu\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense_1\", \"units\": 2, "
    "\"activation\": \"linear\"}}]},"
    "\"compile_config\": {\"optimizer\": {\"class_name\": \"Adam\", \"config\": "
    "{\"learning_rate\": 0.01}}, \"loss\": \"mean_squared_error\"}}";

enum { batch = 8, features = 4, outputs = 2 };

/* The global batch of the regression: y = (sum of x, first - last). */
static void regression_batch(float x[batch][features], float y[batch][outputs]) {
  for (int i = 0; i < batch; ++i) {
    float sum = 0;
    for (int j = 0; j < features; ++j) {
      x[i][j] = (float)cos(0.3 * (i * features + j));
      sum += x[i][j];
    }
    y[i][0] = sum;
    y[i][1] = x[i][0] - x[i][features - 1];
  }
}

/* Predictions of `m` for this process's rows of the regression batch, into `out` (whole). */
static void predict_regression(kdist_model m, float out[batch][outputs]) {
  float x[batch][features], y[batch][outputs];
  int64_t first = 0, count = 0;
  regression_batch(x, y);
  OK(kdist_model_input_rows(m, batch, &first, &count));
  const int64_t shape[2] = {count, features};
  memset(out, 0, sizeof(float) * batch * outputs);
  OK(kdist_model_predict(m, &x[first][0], 2, shape, batch, KDIST_MEMORY_HOST, &out[first][0],
                         count * outputs));
  /* every row on every process: sum the processes' rows (a row is predicted by each process of
     its model replica: count it once) */
  int processes = 1;
  OK(kdist_process_count(&processes));
  float all[batch][outputs];
  MPI_Allreduce(out, all, batch * outputs, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  int64_t replicas = 0; /* processes that hold row 0 */
  int64_t holds = first == 0 && count > 0;
  MPI_Allreduce(&holds, &replicas, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < batch; ++i) {
    for (int j = 0; j < outputs; ++j) out[i][j] = all[i][j] / (float)replicas;
  }
}

static double train_regression(kdist_model m, int steps) {
  float x[batch][features], y[batch][outputs];
  int64_t first = 0, count = 0;
  double loss = 0;
  regression_batch(x, y);
  OK(kdist_model_input_rows(m, batch, &first, &count));
  const int64_t xs[2] = {count, features}, ys[2] = {count, outputs};
  for (int s = 0; s < steps; ++s) {
    OK(kdist_model_train_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys, batch, KDIST_MEMORY_HOST,
                              &loss));
  }
  return loss;
}

static float max_difference(const float* a, const float* b, int n) {
  float d = 0;
  for (int i = 0; i < n; ++i) d = fmaxf(d, fabsf(a[i] - b[i]));
  return d;
}

/* The Keras CNN fixture (tests/data/keras_cnn.keras, 8 x 8 x 1 -> 10 classes) predicts what Keras
 * predicted for the fixture script's probe, and trains on labels. */
static void keras_file(const char* data, const char* scratch, kdist_distribution dist) {
  char path[1024], saved[1024];
  snprintf(path, sizeof path, "%s/keras_cnn.keras", data);
  kdist_model m = NULL;
  OK(kdist_model_load(path, dist, 1337, &m));
  int64_t input[8];
  int in_rank = 0;
  OK(kdist_model_input_shape(m, input, 8, &in_rank));
  CHECK(in_rank == 3 && input[0] == 8 && input[1] == 8 && input[2] == 1);
  int64_t classes = 0;
  OK(kdist_model_output_size(m, &classes));
  CHECK(classes == 10);

  float probe[4 * 64], want[40], got[40];
  for (int i = 0; i < 4 * 64; ++i) probe[i] = (float)cos(0.11 * i);
  snprintf(saved, sizeof saved, "%s/keras_cnn_predictions.txt", data);
  FILE* f = fopen(saved, "r");
  CHECK(f != NULL);
  for (int i = 0; f != NULL && i < 40; ++i) CHECK(fscanf(f, "%f", &want[i]) == 1);
  if (f != NULL) fclose(f);
  int64_t first = 0, count = 0;
  OK(kdist_model_input_rows(m, 4, &first, &count));
  const int64_t xs[4] = {count, 8, 8, 1};
  memset(got, 0, sizeof got);
  OK(kdist_model_predict(m, probe + first * 64, 4, xs, 4, KDIST_MEMORY_HOST, got + first * 10,
                         count * 10));
  CHECK(max_difference(got + first * 10, want + first * 10, (int)count * 10) < 1e-5f);

  /* the output does not fit `out`; x of another shape */
  FAILS(kdist_model_predict(m, probe, 4, xs, 4, KDIST_MEMORY_HOST, got, count * 10 - 1),
        KDIST_VALUE_ERROR, "rows x kdist_model_output_size");
  const int64_t wrong[4] = {count, 8, 4, 2};
  FAILS(kdist_model_predict(m, probe, 4, wrong, 4, KDIST_MEMORY_HOST, got, 40), KDIST_VALUE_ERROR,
        "given to a model of input shape (8, 8, 1)");
  const int64_t flat[2] = {count, 64};
  FAILS(kdist_model_predict(m, probe, 2, flat, 4, KDIST_MEMORY_HOST, got, 40), KDIST_VALUE_ERROR,
        "x_local has rank 2");
  const int64_t rank3[3] = {count, 8, 8};
  FAILS(kdist_model_predict(m, probe, 3, rank3, 4, KDIST_MEMORY_HOST, got, 40), KDIST_VALUE_ERROR,
        "x has rank 3");

  /* training on labels lowers the loss of a fixed batch */
  int32_t labels[4] = {3, 1, 4, 1};
  double loss0 = 0, loss = 0, accuracy = -1;
  OK(kdist_model_train_step_labels(m, probe + first * 64, 4, xs, labels + first, 4,
                                   KDIST_MEMORY_HOST, &loss0, &accuracy));
  CHECK(accuracy >= 0 && accuracy <= 1);
  for (int s = 0; s < 30; ++s) {
    OK(kdist_model_train_step_labels(m, probe + first * 64, 4, xs, labels + first, 4,
                                     KDIST_MEMORY_HOST, &loss, NULL));
  }
  CHECK(loss < 0.5 * loss0);
  int64_t iterations = 0;
  OK(kdist_model_iterations(m, &iterations));
  int64_t before = 0;
  {
    /* the fixture was saved after some Keras steps: 31 more */
    kdist_model fresh = NULL;
    OK(kdist_model_load(path, dist, 1337, &fresh));
    OK(kdist_model_iterations(fresh, &before));
    OK(kdist_model_free(fresh));
  }
  CHECK(iterations == before + 31);

  /* a .keras file written and read back predicts the same */
  snprintf(saved, sizeof saved, "%s/c_api_cnn.keras", scratch);
  OK(kdist_model_save(m, saved));
  kdist_model back = NULL;
  OK(kdist_model_load(saved, dist, 1337, &back));
  float again[40];
  memset(again, 0, sizeof again);
  OK(kdist_model_predict(m, probe + first * 64, 4, xs, 4, KDIST_MEMORY_HOST, got + first * 10,
                         count * 10));
  OK(kdist_model_predict(back, probe + first * 64, 4, xs, 4, KDIST_MEMORY_HOST, again + first * 10,
                         count * 10));
  CHECK(max_difference(got + first * 10, again + first * 10, (int)count * 10) == 0);
  OK(kdist_model_free(back));
  OK(kdist_model_free(m));

  snprintf(saved, sizeof saved, "%s/no_such_model.keras", scratch);
  FAILS(kdist_model_load(saved, dist, 1, &m), KDIST_VALUE_ERROR, "no_such_model.keras");
}

/* A model from Keras JSON trains; its weights and checkpoint files read back into another. */
static void json_model(const char* scratch, kdist_distribution dist) {
  kdist_model m = NULL, other = NULL;
  OK(kdist_model_from_json(regression_json, dist, 7, &m));
  const double first_loss = train_regression(m, 1);
  const double loss = train_regression(m, 60);
  CHECK(loss < 0.2 * first_loss);

  /* its JSON builds the same architecture; the weights file carries the trained values */
  int64_t length = 0;
  OK(kdist_model_to_json(m, NULL, 0, &length));
  CHECK(length > 0);
  char* text = malloc((size_t)length + 1);
  OK(kdist_model_to_json(m, text, length + 1, &length));
  CHECK(strstr(text, "\"dense_1\"") != NULL && strstr(text, "Adam") != NULL);
  OK(kdist_model_from_json(text, dist, 99, &other));
  free(text);
  char path[1024];
  float p[batch][outputs], q[batch][outputs];
  predict_regression(m, p);
  predict_regression(other, q);
  CHECK(max_difference(&p[0][0], &q[0][0], batch * outputs) > 1e-3f); /* other seed, untrained */
  snprintf(path, sizeof path, "%s/c_api.weights.h5", scratch);
  OK(kdist_model_save_weights(m, path));
  OK(kdist_model_load_weights(other, path));
  predict_regression(other, q);
  CHECK(max_difference(&p[0][0], &q[0][0], batch * outputs) == 0);

  /* a checkpoint restores the variables, the optimizer's state and the step counter: the next
     steps of both models agree */
  snprintf(path, sizeof path, "%s/c_api_checkpoint", scratch);
  OK(kdist_model_save_checkpoint(m, path));
  kdist_model restored = NULL;
  OK(kdist_model_from_json(regression_json, dist, 3, &restored));
  OK(kdist_model_load_checkpoint(restored, path));
  int64_t a = 0, b = 0;
  OK(kdist_model_iterations(m, &a));
  OK(kdist_model_iterations(restored, &b));
  CHECK(a == 61 && b == 61);
  const double l1 = train_regression(m, 3), l2 = train_regression(restored, 3);
  CHECK(l1 == l2);
  predict_regression(m, p);
  predict_regression(restored, q);
  CHECK(max_difference(&p[0][0], &q[0][0], batch * outputs) == 0);

  /* the loss without an update; a learning rate of 0 changes nothing */
  float x[batch][features], y[batch][outputs];
  regression_batch(x, y);
  int64_t first = 0, count = 0;
  OK(kdist_model_input_rows(m, batch, &first, &count));
  const int64_t xs[2] = {count, features}, ys[2] = {count, outputs};
  double t1 = 0, t2 = 0, t3 = 0;
  OK(kdist_model_test_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys, batch, KDIST_MEMORY_HOST,
                           &t1));
  OK(kdist_model_test_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys, batch, KDIST_MEMORY_HOST,
                           &t2));
  CHECK(t1 == t2);
  OK(kdist_model_set_learning_rate(m, 0.0));
  OK(kdist_model_train_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys, batch, KDIST_MEMORY_HOST,
                            &t3));
  OK(kdist_model_test_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys, batch, KDIST_MEMORY_HOST,
                           &t3));
  CHECK(t3 == t1);

  /* error paths */
  FAILS(kdist_model_set_learning_rate(m, -1), KDIST_VALUE_ERROR, "not a learning rate");
  const int64_t ys_short[2] = {count > 0 ? count - 1 : 1, outputs};
  FAILS(kdist_model_train_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys_short, batch,
                               KDIST_MEMORY_HOST, &t3),
        KDIST_VALUE_ERROR, "one row of targets per row of x");
  FAILS(kdist_model_train_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys, 0, KDIST_MEMORY_HOST,
                               &t3),
        KDIST_INVALID_ARGUMENT, "global_batch is 0");
  const int64_t negative[2] = {-1, features};
  FAILS(kdist_model_train_step(m, &x[first][0], 2, negative, &y[first][0], 2, ys, batch,
                               KDIST_MEMORY_HOST, &t3),
        KDIST_INVALID_ARGUMENT, "x's extent 0 is -1");
  FAILS(kdist_model_train_step(m, NULL, 2, xs, &y[first][0], 2, ys, batch, KDIST_MEMORY_HOST, &t3),
        KDIST_INVALID_ARGUMENT, "x is NULL");
  FAILS(kdist_model_train_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys, batch, 7, &t3),
        KDIST_INVALID_ARGUMENT, "KDIST_MEMORY_HOST or KDIST_MEMORY_DEVICE");
  FAILS(kdist_model_train_step(NULL, &x[first][0], 2, xs, &y[first][0], 2, ys, batch,
                               KDIST_MEMORY_HOST, &t3),
        KDIST_INVALID_ARGUMENT, "the model is NULL");
  int64_t shape[1];
  int rank_of = 0;
  FAILS(kdist_model_input_shape(m, shape, 0, &rank_of), KDIST_INVALID_ARGUMENT, "room for 0");
  FAILS(kdist_model_from_json("{\"class_name\": \"Sequential\"", dist, 1, &other),
        KDIST_VALUE_ERROR, "kdist::model_from_json");
  FAILS(kdist_model_from_json(
            "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
            "\"InputLayer\", \"config\": {\"batch_shape\": [null, 4]}}, {\"class_name\": "
            "\"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}}]}}",
            dist, 1, &other),
        KDIST_VALUE_ERROR,
        "saved without compile (no optimizer, no loss); compile the model in Keras before "
        "model.to_json()");
  OK(kdist_model_free(restored));
  OK(kdist_model_free(m));
  FAILS(kdist_model_train_step(m, &x[first][0], 2, xs, &y[first][0], 2, ys, batch,
                               KDIST_MEMORY_HOST, &t3),
        KDIST_INVALID_ARGUMENT, "not a live kdist_model");
  /* `other` is left for kdist_finalize to free */
}

/* The GPT Keras wrote in its functional API (tests/data/keras_gpt.keras): token ids in, Keras'
 * logits out, trained on next-token targets (rows of token ids) - a language model from C. */
static void keras_gpt(const char* data, kdist_distribution dist) {
  char path[1024];
  snprintf(path, sizeof path, "%s/keras_gpt.keras", data);
  kdist_model m = NULL;
  OK(kdist_model_load(path, dist, 1, &m));
  int64_t size = 0;
  OK(kdist_model_output_size(m, &size));
  CHECK(size == 8 * 32); /* (sequence, vocabulary) logits per example */
  float x[4][8], y[4][8];
  for (int64_t k = 0; k < 32; ++k) {
    x[k / 8][k % 8] = (float)((7 * k * k + 3 * k + 1) % 32);
    y[k / 8][k % 8] = (float)((7 * (k + 1) * (k + 1) + 3 * (k + 1) + 1) % 32);
  }
  static float want[4 * 8 * 32], got[4 * 8 * 32];
  snprintf(path, sizeof path, "%s/keras_gpt_predictions.txt", data);
  FILE* f = fopen(path, "r");
  CHECK(f != NULL);
  for (int i = 0; f != NULL && i < 4 * 8 * 32; ++i) CHECK(fscanf(f, "%f", &want[i]) == 1);
  if (f != NULL) fclose(f);
  int64_t first = 0, rows = 0;
  OK(kdist_model_input_rows(m, 4, &first, &rows));
  const int64_t xs[2] = {rows, 8};
  OK(kdist_model_predict(m, &x[first][0], 2, xs, 4, KDIST_MEMORY_HOST, got + first * 256,
                         rows * 256));
  float worst = 0;
  for (int64_t i = first * 256; i < (first + rows) * 256; ++i) {
    worst = fmaxf(worst, fabsf(got[i] - want[i]) / (1 + fabsf(want[i])));
  }
  CHECK(worst < 2e-5f);
  double loss0 = 0, loss = 0;
  OK(kdist_model_test_step(m, &x[first][0], 2, xs, &y[first][0], 2, xs, 4, KDIST_MEMORY_HOST,
                           &loss0));
  for (int s = 0; s < 5; ++s) {
    OK(kdist_model_train_step(m, &x[first][0], 2, xs, &y[first][0], 2, xs, 4, KDIST_MEMORY_HOST,
                              &loss));
  }
  OK(kdist_model_test_step(m, &x[first][0], 2, xs, &y[first][0], 2, xs, 4, KDIST_MEMORY_HOST,
                           &loss));
  CHECK(loss < loss0);
  OK(kdist_model_free(m));
}

/* ModelParallel over a (1, P) mesh with the first kernel's columns sharded computes what
 * DataParallel does from the same weights. */
static void model_parallel(const char* scratch, kdist_distribution data_parallel) {
  int processes = 1;
  OK(kdist_process_count(&processes));
  const int64_t mesh[2] = {1, processes};
  kdist_distribution mp = NULL;
  OK(kdist_model_parallel(2, mesh, "batch,model", "{\"dense/kernel\": [null, \"model\"]}", "batch",
                          &mp));
  kdist_model a = NULL, b = NULL;
  OK(kdist_model_from_json(regression_json, data_parallel, 5, &a));
  OK(kdist_model_from_json(regression_json, mp, 6, &b));
  char path[1024];
  snprintf(path, sizeof path, "%s/c_api_mp.weights.h5", scratch);
  OK(kdist_model_save_weights(a, path));
  OK(kdist_model_load_weights(b, path));
  const double la = train_regression(a, 5), lb = train_regression(b, 5);
  CHECK(fabs(la - lb) <= 1e-5 * fabs(la));
  float p[batch][outputs], q[batch][outputs];
  predict_regression(a, p);
  predict_regression(b, q);
  CHECK(max_difference(&p[0][0], &q[0][0], batch * outputs) < 1e-5f);
  OK(kdist_model_free(a));
  OK(kdist_model_free(b));
  OK(kdist_distribution_free(mp));

  kdist_distribution bad = NULL;
  FAILS(kdist_model_parallel(2, mesh, "batch", "{}", NULL, &bad), KDIST_VALUE_ERROR,
        "1 axis names ('batch') for a mesh of 2 axes");
  FAILS(kdist_model_parallel(2, mesh, "batch,model", "{\"dense/kernel\": [null, \"modle\"]}", NULL,
                             &bad),
        KDIST_VALUE_ERROR, "modle");
  FAILS(kdist_model_parallel(2, mesh, "batch,model", "{\"dense/kernel\": [null, ", NULL, &bad),
        KDIST_VALUE_ERROR, "kdist_model_parallel's rules");
  FAILS(kdist_model_parallel(0, mesh, "batch,model", "{}", NULL, &bad), KDIST_INVALID_ARGUMENT,
        "the mesh's rank must be at least 1");
  FAILS(kdist_distribution_free((kdist_distribution)&bad), KDIST_INVALID_ARGUMENT,
        "not a live kdist_distribution");
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_c_api <tests/data> <scratch directory>\n");
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  kdist_distribution dist = NULL;
  FAILS(kdist_data_parallel(&dist), KDIST_NOT_INITIALIZED, "call kdist_initialize(comm) first");
  /* kdist on a communicator of its own (a duplicate of the world, as a code would give it) */
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  OK(kdist_initialize(comm));
  FAILS(kdist_initialize(comm), KDIST_INVALID_ARGUMENT, "initialized already");
  int id = -1, count = 0, size = 0;
  OK(kdist_process_id(&id));
  OK(kdist_process_count(&count));
  MPI_Comm_size(comm, &size);
  CHECK(id == rank && count == size);
  FAILS(kdist_model_load("x.keras", NULL, 1, NULL), KDIST_INVALID_ARGUMENT,
        "the distribution is NULL");
  OK(kdist_data_parallel(&dist));
  FAILS(kdist_model_load(NULL, dist, 1, NULL), KDIST_INVALID_ARGUMENT, "path is NULL");

  keras_file(argv[1], argv[2], dist);
  json_model(argv[2], dist);
  keras_gpt(argv[1], dist);
  model_parallel(argv[2], dist);

  OK(kdist_finalize()); /* frees what is left: the distribution, one model */
  FAILS(kdist_process_id(&id), KDIST_NOT_INITIALIZED, "kdist_initialize");
  FAILS(kdist_finalize(), KDIST_NOT_INITIALIZED, "kdist_initialize");
  /* kdist again on the same communicator, after a finalize */
  OK(kdist_initialize(comm));
  OK(kdist_data_parallel(&dist));
  OK(kdist_finalize());

  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && all == 0) printf("test_c_api: passed\n");
  if (rank == 0 && all != 0) printf("test_c_api: FAILED (%d failed checks)\n", all);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return all ? 1 : 0;
}
