/* Trains a Keras JSON model one step through an installed libkdist_c. */
#include <kdist.h>
#include <stdio.h>

int main(int argc, char** argv) {
  int provided = 0, rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* json =
      "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": \"InputLayer\", "
      "\"config\": {\"batch_shape\": [null, 2]}}, {\"class_name\": \"Dense\", \"config\": "
      "{\"name\": \"d\", \"units\": 1}}]}, \"compile_config\": {\"optimizer\": {\"class_name\": "
      "\"SGD\", \"config\": {\"learning_rate\": 0.1}}, \"loss\": \"mean_squared_error\"}}";
  kdist_distribution dist = NULL;
  kdist_model model = NULL;
  int64_t first = 0, rows = 0;
  double loss = -1;
  float x[4] = {1, 2, 3, 4}, y[2] = {1, 0};
  int ok = kdist_initialize(MPI_COMM_WORLD) == KDIST_OK && kdist_data_parallel(&dist) == KDIST_OK &&
           kdist_model_from_json(json, dist, 1, &model) == KDIST_OK &&
           kdist_model_input_rows(model, 2, &first, &rows) == KDIST_OK;
  const int64_t xs[2] = {rows, 2}, ys[2] = {rows, 1};
  ok = ok && kdist_model_train_step(model, x + 2 * first, 2, xs, y + first, 2, ys, 2,
                                    KDIST_MEMORY_HOST, &loss) == KDIST_OK;
  if (!ok) fprintf(stderr, "error: %s\n", kdist_last_error());
  if (ok && rank == 0) printf("consumer c ok: loss %.4f\n", loss);
  kdist_finalize();
  MPI_Finalize();
  return ok ? 0 : 1;
}
