! kdist's Fortran module (bindings/fortran/kdist.f90) under mpiexec: starting on a communicator of
! the caller's (type(MPI_Comm), then an integer handle), Fortran's column order (the Keras CNN
! fixture predicts, from an array probe(1, 8, 8, 4), what Keras predicted for its (4, 8, 8, 1)
! probe), training a model from Keras JSON on labels and on targets, the files read back,
! ModelParallel (FSDP by rules) against DataParallel, and the error paths' statuses and messages.
!
!   mpiexec -n 2 test_fortran <tests/data> <a scratch directory shared by the processes>
program test_fortran
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use kdist
  implicit none

  character(len=*), parameter :: regression_json = &
    '{"class_name": "Sequential", "config": {"name": "sequential", "layers": [' // &
    '{"class_name": "InputLayer", "config": {"batch_shape": [null, 4]}},' // &
    '{"class_name": "Dense", "config": {"name": "dense", "units": 8, "activation": "relu"}},' // &
    '{"class_name": "Dense", "config": {"name": "dense_1", "units": 2}}]},' // &
    '"compile_config": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.01}},' // &
    ' "loss": "mean_squared_error"}}'
  integer, parameter :: batch = 8, features = 4, outputs = 2

  type(MPI_Comm) :: comm
  type(kdist_distribution) :: dist
  integer :: rank, processes, failures, all_failures, id
  character(len=1024) :: data, scratch

  failures = 0
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call get_command_argument(1, data)
  call get_command_argument(2, scratch)

  call expect_failure(kdist_data_parallel(dist), KDIST_NOT_INITIALIZED, "kdist_initialize", __LINE__)
  call MPI_Comm_dup(MPI_COMM_WORLD, comm)
  call ok(kdist_initialize(comm), __LINE__)
  call ok(kdist_process_id(id), __LINE__)
  call ok(kdist_process_count(processes), __LINE__)
  call check(id == rank, "process id", __LINE__)
  call ok(kdist_data_parallel(dist), __LINE__)

  call keras_file()
  call json_model()
  call model_parallel()

  call ok(kdist_finalize(), __LINE__)
  ! again, from the integer handle of `use mpi`
  call ok(kdist_initialize(comm%MPI_VAL), __LINE__)
  call ok(kdist_finalize(), __LINE__)
  call expect_failure(kdist_finalize(), KDIST_NOT_INITIALIZED, "kdist_initialize", __LINE__)

  call MPI_Allreduce(failures, all_failures, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) then
    if (all_failures == 0) then
      print '(a)', "test_fortran: passed"
    else
      print '(a, i0, a)', "test_fortran: FAILED (", all_failures, " failed checks)"
    end if
  end if
  call MPI_Comm_free(comm)
  call MPI_Finalize()
  if (all_failures /= 0) error stop 1

contains

  subroutine check(condition, what, line)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: what
    integer, intent(in) :: line
    if (.not. condition) then
      print '(a, i0, a, i0, 4a)', "[", rank, "] test_fortran.f90:", line, ": ", what, &
        " failed; kdist_last_error: ", kdist_last_error()
      failures = failures + 1
    end if
  end subroutine

  subroutine ok(status, line)
    integer, intent(in) :: status, line
    call check(status == KDIST_OK, "status KDIST_OK", line)
  end subroutine

  subroutine expect_failure(status, expected, text, line)
    integer, intent(in) :: status, expected, line
    character(len=*), intent(in) :: text
    call check(status == expected, "the expected status", line)
    call check(index(kdist_last_error(), text) > 0, "a message with '" // text // "'", line)
  end subroutine

  !> The regression's global batch: y = (sum of x, first - last), x(:, i) = cos(0.3 (4 (i-1) + j-1)).
  subroutine regression_batch(x, y)
    real(c_float), intent(out) :: x(features, batch), y(outputs, batch)
    integer :: i, j
    do i = 1, batch
      do j = 1, features
        x(j, i) = cos(0.3 * real((i - 1) * features + j - 1))
      end do
      y(1, i) = sum(x(:, i))
      y(2, i) = x(1, i) - x(features, i)
    end do
  end subroutine

  !> Trains `steps` steps on this process's rows; the last loss.
  real(c_double) function train(model, steps) result(loss)
    type(kdist_model), intent(in) :: model
    integer, intent(in) :: steps
    real(c_float) :: x(features, batch), y(outputs, batch)
    integer :: first, count, s
    call regression_batch(x, y)
    call ok(kdist_input_rows(model, batch, first, count), __LINE__)
    do s = 1, steps
      call ok(kdist_train_step(model, x(:, first:first + count - 1), &
                               y(:, first:first + count - 1), batch, loss), __LINE__)
    end do
  end function

  !> Every row's prediction on every process (each row counted once per model replica).
  subroutine predict_all(model, p)
    type(kdist_model), intent(in) :: model
    real(c_float), intent(out) :: p(outputs, batch)
    real(c_float) :: x(features, batch), y(outputs, batch), mine(outputs, batch)
    integer :: first, count, holds, replicas
    call regression_batch(x, y)
    call ok(kdist_input_rows(model, batch, first, count), __LINE__)
    mine = 0
    call ok(kdist_predict(model, x(:, first:first + count - 1), batch, &
                          mine(:, first:first + count - 1)), __LINE__)
    call MPI_Allreduce(mine, p, outputs * batch, MPI_REAL, MPI_SUM, MPI_COMM_WORLD)
    holds = merge(1, 0, first == 1 .and. count > 0)
    call MPI_Allreduce(holds, replicas, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
    p = p / real(replicas)
  end subroutine

  !> The test step: the loss without an update (twice the same, no step counted).
  subroutine test_losses(model)
    type(kdist_model), intent(in) :: model
    real(c_float) :: x(features, batch), y(outputs, batch)
    real(c_double) :: t1, t2
    integer :: first, count
    integer(c_int64_t) :: before, after
    call regression_batch(x, y)
    call ok(kdist_input_rows(model, batch, first, count), __LINE__)
    call ok(kdist_iterations(model, before), __LINE__)
    call ok(kdist_test_step(model, x(:, first:first + count - 1), y(:, first:first + count - 1), &
                            batch, t1), __LINE__)
    call ok(kdist_test_step(model, x(:, first:first + count - 1), y(:, first:first + count - 1), &
                            batch, t2), __LINE__)
    call ok(kdist_iterations(model, after), __LINE__)
    call check(t1 == t2 .and. t1 > 0 .and. before == after, "the test step", __LINE__)
  end subroutine

  subroutine keras_file()
    type(kdist_model) :: model
    real(c_float), allocatable :: probe(:, :, :, :), want(:, :), got(:, :)
    integer, allocatable :: shape(:)
    integer(c_int32_t) :: labels(4)
    real(c_double) :: loss0, loss, accuracy
    integer :: i, first, count, n, unit, s
    call ok(kdist_model_load(model, trim(data) // "/keras_cnn.keras", dist, 1337_c_int64_t), &
            __LINE__)
    call ok(kdist_input_shape(model, shape), __LINE__)
    call check(all(shape == [1, 8, 8]), "the input shape in Fortran's order", __LINE__)
    call ok(kdist_output_size(model, n), __LINE__)
    call check(n == 10, "10 classes", __LINE__)
    ! Keras' probe: (4, 8, 8, 1) of cos(0.11 i), row-major; Fortran's (1, 8, 8, 4), column-major
    probe = reshape([(cos(0.11 * real(i)), i = 0, 255)], [1, 8, 8, 4])
    allocate (want(10, 4), got(10, 4))
    open (newunit=unit, file=trim(data) // "/keras_cnn_predictions.txt", action="read")
    read (unit, *) want
    close (unit)
    call ok(kdist_input_rows(model, 4, first, count), __LINE__)
    got = 0
    call ok(kdist_predict(model, probe(:, :, :, first:first + count - 1), 4, &
                          got(:, first:first + count - 1)), __LINE__)
    call check(maxval(abs(got(:, first:first + count - 1) - want(:, first:first + count - 1))) &
               < 1e-5, "Keras' predictions", __LINE__)
    ! a wrong shape: (8, 8, 1) examples given as (2, 4, 8)
    call expect_failure(kdist_predict(model, reshape(probe, [2, 4, 8, 4]), 4, got), &
                        KDIST_VALUE_ERROR, "given to a model of input shape (8, 8, 1)", __LINE__)
    call expect_failure(kdist_predict(model, probe, 4, got(:, 1:1)), KDIST_VALUE_ERROR, &
                        "rows x kdist_model_output_size", __LINE__)
    labels = [3, 1, 4, 1]
    call ok(kdist_train_step_labels(model, probe(:, :, :, first:first + count - 1), &
                                    labels(first:first + count - 1), 4, loss0, accuracy), __LINE__)
    call check(accuracy >= 0 .and. accuracy <= 1, "an accuracy", __LINE__)
    do s = 1, 30
      call ok(kdist_train_step_labels(model, probe(:, :, :, first:first + count - 1), &
                                      labels(first:first + count - 1), 4, loss), __LINE__)
    end do
    call check(loss < 0.5 * loss0, "training lowers the loss", __LINE__)
    call ok(kdist_model_free(model), __LINE__)
    call expect_failure(kdist_model_load(model, trim(scratch) // "/none.keras", dist), &
                        KDIST_VALUE_ERROR, "none.keras", __LINE__)
  end subroutine

  subroutine json_model()
    type(kdist_model) :: model, other
    character(len=:), allocatable :: json
    real(c_double) :: first_loss, loss
    real(c_float) :: p(outputs, batch), q(outputs, batch)
    integer(c_int64_t) :: steps
    call ok(kdist_model_from_json(model, regression_json, dist, 7_c_int64_t), __LINE__)
    first_loss = train(model, 1)
    loss = train(model, 60)
    call check(loss < 0.2 * first_loss, "training lowers the loss", __LINE__)
    call ok(kdist_iterations(model, steps), __LINE__)
    call check(steps == 61, "61 steps", __LINE__)
    call test_losses(model)
    call ok(kdist_to_json(model, json), __LINE__)
    call check(index(json, '"dense_1"') > 0, "the JSON names dense_1", __LINE__)
    call ok(kdist_model_from_json(other, json, dist, 99_c_int64_t), __LINE__)
    call ok(kdist_save_weights(model, trim(scratch) // "/fortran.weights.h5"), __LINE__)
    call ok(kdist_load_weights(other, trim(scratch) // "/fortran.weights.h5"), __LINE__)
    call predict_all(model, p)
    call predict_all(other, q)
    call check(all(p == q), "the weights file's predictions", __LINE__)
    call ok(kdist_save_checkpoint(model, trim(scratch) // "/fortran_checkpoint"), __LINE__)
    call ok(kdist_save(model, trim(scratch) // "/fortran.keras"), __LINE__)
    call ok(kdist_model_free(other), __LINE__)
    call ok(kdist_model_load(other, trim(scratch) // "/fortran.keras", dist), __LINE__)
    call predict_all(other, q)
    call check(all(p == q), "the .keras file's predictions", __LINE__)
    call ok(kdist_model_free(other), __LINE__)
    call ok(kdist_model_from_json(other, regression_json, dist, 3_c_int64_t), __LINE__)
    call ok(kdist_load_checkpoint(other, trim(scratch) // "/fortran_checkpoint"), __LINE__)
    call check(train(model, 2) == train(other, 2), "the checkpoint's next steps", __LINE__)
    call expect_failure(kdist_set_learning_rate(model, -1.0_c_double), KDIST_VALUE_ERROR, &
                        "not a learning rate", __LINE__)
    call ok(kdist_model_free(model), __LINE__)
    call expect_failure(kdist_iterations(model, steps), KDIST_INVALID_ARGUMENT, &
                        "the model is NULL", __LINE__)
    ! `other` is left for kdist_finalize
  end subroutine

  ! FSDP by rules: the first kernel's columns sharded over the batch axis itself.
  subroutine model_parallel()
    type(kdist_distribution) :: fsdp, bad
    type(kdist_model) :: a, b
    real(c_double) :: la, lb
    real(c_float) :: p(outputs, batch), q(outputs, batch)
    call ok(kdist_model_parallel(fsdp, [processes], "batch", '{"dense/kernel": [null, "batch"]}'), &
            __LINE__)
    call ok(kdist_model_from_json(a, regression_json, dist, 5_c_int64_t), __LINE__)
    call ok(kdist_model_from_json(b, regression_json, fsdp, 6_c_int64_t), __LINE__)
    call ok(kdist_save_weights(a, trim(scratch) // "/fortran_fsdp.weights.h5"), __LINE__)
    call ok(kdist_load_weights(b, trim(scratch) // "/fortran_fsdp.weights.h5"), __LINE__)
    la = train(a, 5)
    lb = train(b, 5)
    call check(abs(la - lb) <= 1e-5 * abs(la), "FSDP's loss is DataParallel's", __LINE__)
    call predict_all(a, p)
    call predict_all(b, q)
    call check(maxval(abs(p - q)) < 1e-5, "FSDP's predictions are DataParallel's", __LINE__)
    call ok(kdist_model_free(a), __LINE__)
    call ok(kdist_model_free(b), __LINE__)
    call ok(kdist_distribution_free(fsdp), __LINE__)
    call expect_failure(kdist_model_parallel(bad, [processes, 1], "batch", "{}"), &
                        KDIST_VALUE_ERROR, "1 axis names ('batch') for a mesh of 2 axes", __LINE__)
  end subroutine

end program test_fortran
