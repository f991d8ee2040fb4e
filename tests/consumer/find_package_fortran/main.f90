! Trains a Keras JSON model one step through an installed kdist Fortran module.
program consumer
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use kdist
  implicit none
  type(kdist_distribution) :: dist
  type(kdist_model) :: model
  real(c_float) :: x(2, 2), y(1, 2)
  real(c_double) :: loss
  integer :: rank, first, rows, istat
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  x = reshape([1, 2, 3, 4], [2, 2])
  y = reshape([1, 0], [1, 2])
  istat = kdist_initialize(MPI_COMM_WORLD)
  if (istat == KDIST_OK) istat = kdist_data_parallel(dist)
  if (istat == KDIST_OK) istat = kdist_model_from_json(model, '{"class_name": "Sequential", ' // &
    '"config": {"layers": [{"class_name": "InputLayer", "config": {"batch_shape": [null, 2]}}, ' // &
    '{"class_name": "Dense", "config": {"name": "d", "units": 1}}]}, "compile_config": ' // &
    '{"optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.1}}, ' // &
    '"loss": "mean_squared_error"}}', dist)
  if (istat == KDIST_OK) istat = kdist_input_rows(model, 2, first, rows)
  if (istat == KDIST_OK) istat = kdist_train_step(model, x(:, first:first + rows - 1), &
                                                  y(:, first:first + rows - 1), 2, loss)
  if (istat /= KDIST_OK) print '(2a)', "error: ", kdist_last_error()
  if (istat == KDIST_OK .and. rank == 0) print '(a, f8.4)', "consumer fortran ok: loss", loss
  istat = kdist_finalize()
  call MPI_Finalize()
end program consumer
