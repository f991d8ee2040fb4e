/* The kdist side of scripts/keras/check_gpt_model_file.py, through kdist's C API: loads a GPT
 * Keras saved (argv[1]), writes its logits for gpt_keras_side.py's batch (argv[2]) and its loss,
 * trains argv[3] steps on the batch, writes the logits again (argv[4]) and saves the model as a
 * Keras file (argv[5]). Sizes: vocabulary 32, sequence 8, batch 4 (the script's defaults). */
#include <kdist.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { vocab = 32, seq = 8, batch = 4 };
static int rank = 0;

static void check(int status) {
  if (status != KDIST_OK) {
    fprintf(stderr, "error: process %d: %s\n", rank, kdist_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Every row's logits gathered on process 0 (each row counted once), written one position per
 * line. */
static void write_logits(kdist_model m, float x[batch][seq], const char* path) {
  static float mine[batch * seq * vocab], all[batch * seq * vocab];
  int64_t first = 0, rows = 0;
  check(kdist_model_input_rows(m, batch, &first, &rows));
  const int64_t xs[2] = {rows, seq};
  for (int i = 0; i < batch * seq * vocab; ++i) mine[i] = 0;
  check(kdist_model_predict(m, &x[first][0], 2, xs, batch, KDIST_MEMORY_HOST,
                            mine + first * seq * vocab, rows * seq * vocab));
  int holds = first == 0 && rows > 0, replicas = 0;
  MPI_Allreduce(&holds, &replicas, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Reduce(mine, all, batch * seq * vocab, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  FILE* f = fopen(path, "w");
  for (int i = 0; i < batch * seq * vocab; ++i) {
    fprintf(f, "%.9e%c", all[i] / (float)replicas, (i + 1) % vocab ? ' ' : '\n');
  }
  fclose(f);
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 6) {
    if (rank == 0)
      fprintf(stderr, "usage: gpt_model_file IN.keras LOGITS STEPS LOGITS_AFTER OUT.keras\n");
    MPI_Finalize();
    return 2;
  }
  float x[batch][seq], y[batch][seq];
  for (int64_t k = 0; k < batch * seq; ++k) {
    x[k / seq][k % seq] = (float)((7 * k * k + 3 * k + 1) % vocab);
    y[k / seq][k % seq] = (float)((7 * (k + 1) * (k + 1) + 3 * (k + 1) + 1) % vocab);
  }
  check(kdist_initialize(MPI_COMM_WORLD));
  kdist_distribution dist = NULL;
  check(kdist_data_parallel(&dist));
  kdist_model m = NULL;
  check(kdist_model_load(argv[1], dist, 1, &m));
  int64_t first = 0, rows = 0;
  check(kdist_model_input_rows(m, batch, &first, &rows));
  const int64_t xs[2] = {rows, seq};
  double loss = 0;
  write_logits(m, x, argv[2]);
  check(kdist_model_test_step(m, &x[first][0], 2, xs, &y[first][0], 2, xs, batch, KDIST_MEMORY_HOST,
                              &loss));
  if (rank == 0) printf("kdist loss %.9e\n", loss);
  for (int s = 0; s < atoi(argv[3]); ++s) {
    check(kdist_model_train_step(m, &x[first][0], 2, xs, &y[first][0], 2, xs, batch,
                                 KDIST_MEMORY_HOST, &loss));
  }
  check(kdist_model_test_step(m, &x[first][0], 2, xs, &y[first][0], 2, xs, batch, KDIST_MEMORY_HOST,
                              &loss));
  if (rank == 0) printf("kdist loss after %s steps %.9e\n", argv[3], loss);
  write_logits(m, x, argv[4]);
  check(kdist_model_save(m, argv[5]));
  check(kdist_finalize());
  MPI_Finalize();
  return 0;
}
