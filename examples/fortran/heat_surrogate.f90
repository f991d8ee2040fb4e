! In-situ training from a Fortran code (issue 39): a 2-D heat-equation solver trains, while it runs,
! a sharded surrogate of its own time step through kdist's Fortran module (bindings/fortran).
!
! Every process integrates u' = u + alpha * laplacian(u) on its columns of an N x N grid (zero
! outside; halo columns from its neighbours by MPI_Sendrecv on the code's communicator) and, every
! step, gives kdist the pairs (3 x 3 patch of u around a cell, u' at the cell) of its cells as its
! rows of a global batch of N * N: x(9, cells), y(1, cells), Fortran arrays passed as they are.
! kdist runs on a communicator of the code's own (a duplicate of the world), with FSDP by a
! LayoutMap rule: the surrogate's first kernel and bias are sharded over the batch axis, every
! process holding 1/P of them. The surrogate (Keras JSON below, or --model a .keras file) is
! linear, Dense(16) then Dense(1): it can learn the 5-point stencil exactly. After the training
! episodes, a held-out episode compares its error with persistence's (predicting u' = u), and the
! trained surrogate is written as a Keras model file (keras.saving.load_model reads it) and a
! kdist checkpoint.
!
!   mpiexec -n 2 build/examples/fortran_heat_surrogate --grid 32 --episodes 12 --out heat_out
program heat_surrogate
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use kdist
  implicit none

  character(len=*), parameter :: surrogate_json = &
    '{"class_name": "Sequential", "config": {"name": "heat_surrogate", "layers": [' // &
    '{"class_name": "InputLayer", "config": {"batch_shape": [null, 9]}},' // &
    '{"class_name": "Dense", "config": {"name": "dense", "units": 16}},' // &
    '{"class_name": "Dense", "config": {"name": "dense_1", "units": 1, "use_bias": false}}]},' // &
    '"compile_config": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.01}},' // &
    ' "loss": "mean_squared_error"}}'
  ! FSDP by rules: the first layer's variables sharded over the batch axis
  character(len=*), parameter :: fsdp_rules = '{"dense/kernel": [null, "batch"], "dense/bias": ["batch"]}'
  real, parameter :: alpha = 0.2

  integer :: n = 32, episodes = 12, steps = 10
  character(len=512) :: model_path = "", out = "heat_surrogate_out"
  type(MPI_Comm) :: kdist_comm
  type(kdist_distribution) :: fsdp
  type(kdist_model) :: surrogate
  integer :: rank, size, cols, col0, e, s, cells
  real(c_float), allocatable :: u(:, :), next(:, :), x(:, :), y(:, :), p(:, :)
  real(c_double) :: loss, first_loss, errors(2), totals(2)

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size)
  call read_arguments()
  if (mod(n, size) /= 0) then
    if (rank == 0) print '(a, i0, a, i0, a)', "error: a grid of ", n, " columns does not split over ", &
      size, " processes; give a --grid that they divide"
    call MPI_Finalize()
    stop 1
  end if
  cols = n / size
  col0 = rank * cols  ! this process's first column (0-based)
  cells = n * cols
  allocate (u(0:n + 1, 0:cols + 1), next(0:n + 1, 0:cols + 1), x(9, cells), y(1, cells), p(1, cells))

  ! kdist on a communicator of its own; the surrogate, FSDP-sharded
  call MPI_Comm_dup(MPI_COMM_WORLD, kdist_comm)
  call ok(kdist_initialize(kdist_comm))
  call ok(kdist_model_parallel(fsdp, [size], "batch", fsdp_rules))
  if (len_trim(model_path) > 0) then
    call ok(kdist_model_load(surrogate, trim(model_path), fsdp, 1337_c_int64_t))
  else
    call ok(kdist_model_from_json(surrogate, surrogate_json, fsdp, 1337_c_int64_t))
  end if

  ! training episodes: every step of the simulation is a training step of the surrogate
  do e = 1, episodes
    call initial_field(e)
    do s = 1, steps
      call heat_step()
      call pairs()
      call ok(kdist_train_step(surrogate, x, y, n * n, loss))
      if (e == 1 .and. s == 1) first_loss = loss
      u(1:n, 1:cols) = next(1:n, 1:cols)
    end do
    if (rank == 0) print '(a, i0, a, i0, a, es10.3)', "episode ", e, "/", episodes, ": loss ", loss
  end do

  ! a held-out episode: the surrogate's error against persistence's, over the whole grid
  call initial_field(episodes + 1)
  totals = 0
  do s = 1, steps
    call heat_step()
    call pairs()
    call ok(kdist_predict(surrogate, x, n * n, p))
    errors(1) = sum(real(p(1, :) - y(1, :), c_double)**2)
    errors(2) = sum(real(x(5, :) - y(1, :), c_double)**2)  ! x(5, :): the cell's own u
    call MPI_Allreduce(MPI_IN_PLACE, errors, 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
    totals = totals + errors
    u(1:n, 1:cols) = next(1:n, 1:cols)
  end do
  totals = totals / real(steps * n * n, c_double)
  if (rank == 0) then
    print '(a, es10.3, a, es10.3)', "training loss: first ", first_loss, ", last ", loss
    print '(a, es10.3, a, es10.3, a, f8.1, a)', "held-out mean squared error: surrogate ", &
      totals(1), ", persistence ", totals(2), " (", totals(2) / totals(1), "x better)"
  end if

  call execute_command_line("mkdir -p " // trim(out))
  call ok(kdist_save(surrogate, trim(out) // "/heat_surrogate.keras"))
  call ok(kdist_save_checkpoint(surrogate, trim(out) // "/checkpoint"))
  if (rank == 0) print '(3a)', "Saved ", trim(out), "/heat_surrogate.keras and its checkpoint"
  call ok(kdist_finalize())
  call MPI_Comm_free(kdist_comm)
  call MPI_Finalize()
  if (totals(1) >= totals(2)) error stop "the surrogate did not beat persistence"

contains

  !> Stops the job with kdist's message on a failed call (kdist agrees the errors of collective
  !> calls, so every process stops here).
  subroutine ok(status)
    integer, intent(in) :: status
    if (status /= KDIST_OK) then
      print '(a, i0, 2a)', "error: process ", rank, ": ", kdist_last_error()
      call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
  end subroutine

  subroutine read_arguments()
    character(len=512) :: flag, value
    integer :: i
    i = 1
    do while (i <= command_argument_count())
      call get_command_argument(i, flag)
      call get_command_argument(i + 1, value)
      select case (flag)
      case ("--grid")
        read (value, *) n
      case ("--episodes")
        read (value, *) episodes
      case ("--steps")
        read (value, *) steps
      case ("--model")
        model_path = value
      case ("--out")
        out = value
      case default
        if (rank == 0) print '(3a)', "error: unknown option '", trim(flag), &
          "'; give --grid N, --episodes N, --steps N, --model FILE.keras, --out DIR"
        call MPI_Finalize()
        stop 1
      end select
      i = i + 2
    end do
  end subroutine

  !> Episode e's field: the same values whatever the split (a hash of the global cell).
  subroutine initial_field(e)
    integer, intent(in) :: e
    integer :: i, j
    real(c_double) :: h
    u = 0
    do j = 1, cols
      do i = 1, n
        h = sin(real(i, c_double) * 12.9898d0 + real(col0 + j, c_double) * 78.233d0 + &
                real(e, c_double) * 37.719d0) * 43758.5453d0
        u(i, j) = real(h - floor(h), c_float)
      end do
    end do
  end subroutine

  !> The halo columns from the neighbours, then one explicit step into `next`.
  subroutine heat_step()
    integer :: left, right, i, j
    left = merge(rank - 1, MPI_PROC_NULL, rank > 0)
    right = merge(rank + 1, MPI_PROC_NULL, rank + 1 < size)
    u(:, 0) = 0
    u(:, cols + 1) = 0
    call MPI_Sendrecv(u(:, 1), n + 2, MPI_REAL, left, 1, u(:, cols + 1), n + 2, MPI_REAL, right, &
                      1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    call MPI_Sendrecv(u(:, cols), n + 2, MPI_REAL, right, 2, u(:, 0), n + 2, MPI_REAL, left, 2, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    do j = 1, cols
      do i = 1, n
        next(i, j) = u(i, j) + alpha * (u(i - 1, j) + u(i + 1, j) + u(i, j - 1) + u(i, j + 1) - &
                                        4 * u(i, j))
      end do
    end do
  end subroutine

  !> This process's training pairs: x(:, k) the 3 x 3 patch of u around cell k, y(1, k) = u'.
  subroutine pairs()
    integer :: i, j, k
    k = 0
    do j = 1, cols
      do i = 1, n
        k = k + 1
        x(:, k) = reshape(u(i - 1:i + 1, j - 1:j + 1), [9])
        y(1, k) = next(i, j)
      end do
    end do
  end subroutine

end program heat_surrogate
