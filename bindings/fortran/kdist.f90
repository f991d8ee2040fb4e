!> kdist for Fortran (issue 39): a Fortran 2018 module over kdist's C API (bindings/c/kdist.h,
!> libkdist_c), through iso_c_binding. docs/guide/09-c-and-fortran.md is the guide.
!>
!>   use kdist
!>   type(kdist_distribution) :: dist
!>   type(kdist_model) :: model
!>   istat = kdist_initialize(comm)                  ! type(MPI_Comm), or an integer handle
!>   istat = kdist_data_parallel(dist)
!>   istat = kdist_model_load(model, "surrogate.keras", dist)
!>   istat = kdist_train_step(model, x, y, global_batch, loss)   ! x(features, rows), y(outputs, rows)
!>
!> Arrays are assumed-rank (Fortran 2018, as TS 29113): any rank the model takes.
!> Every function returns a status (KDIST_OK or an error; kdist_last_error() says what was wrong).
!> Arrays are Fortran's: the batch is the LAST dimension and a dimension of Keras' shape comes in
!> the reverse order - x(channels, width, height, rows) for Keras' (rows, height, width, channels) -
!> which is the same memory as C's row-major array: nothing is copied. Class labels are 0-based,
!> as Keras'. Models are float32: real(c_float) arrays.
module kdist
  use, intrinsic :: iso_c_binding
  use mpi_f08, only: MPI_Comm
  implicit none
  private

  ! Statuses and memories: keep in step with bindings/c/kdist.h.
  integer, parameter, public :: KDIST_OK = 0, KDIST_VALUE_ERROR = 1, KDIST_RUNTIME_ERROR = 2, &
                                KDIST_INVALID_ARGUMENT = 3, KDIST_NOT_INITIALIZED = 4, &
                                KDIST_INTERNAL_ERROR = 5
  integer, parameter, public :: KDIST_MEMORY_HOST = 0, KDIST_MEMORY_DEVICE = 1

  !> A distribution (DataParallel, ModelParallel), made by kdist_data_parallel / kdist_model_parallel.
  type, public :: kdist_distribution
    type(c_ptr) :: handle = c_null_ptr
  end type
  !> A compiled model, made by kdist_model_load / kdist_model_from_json.
  type, public :: kdist_model
    type(c_ptr) :: handle = c_null_ptr
  end type

  public :: kdist_last_error, kdist_initialize, kdist_finalize, kdist_process_id, &
            kdist_process_count, kdist_data_parallel, kdist_model_parallel, &
            kdist_distribution_free, kdist_model_load, kdist_model_from_json, kdist_model_free, &
            kdist_input_shape, kdist_output_size, kdist_input_rows, kdist_train_step, &
            kdist_train_step_labels, kdist_test_step, kdist_predict, kdist_save, &
            kdist_save_weights, kdist_load_weights, kdist_save_checkpoint, &
            kdist_load_checkpoint, kdist_to_json, kdist_iterations, kdist_set_learning_rate

  !> Starts kdist on the caller's communicator: type(MPI_Comm) (mpi_f08) or an integer (mpi).
  interface kdist_initialize
    module procedure initialize_f08, initialize_integer
  end interface
  interface
    type(c_ptr) function c_last_error() bind(c, name="kdist_last_error")
      import :: c_ptr
    end function
    integer(c_size_t) function c_strlen(s) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
    end function
    integer(c_int) function c_initialize_fortran(comm) bind(c, name="kdist_initialize_fortran")
      import :: c_int
      integer(c_int), value :: comm
    end function
    integer(c_int) function c_finalize() bind(c, name="kdist_finalize")
      import :: c_int
    end function
    integer(c_int) function c_process_id(id) bind(c, name="kdist_process_id")
      import :: c_int
      integer(c_int), intent(out) :: id
    end function
    integer(c_int) function c_process_count(n) bind(c, name="kdist_process_count")
      import :: c_int
      integer(c_int), intent(out) :: n
    end function
    integer(c_int) function c_data_parallel(out) bind(c, name="kdist_data_parallel")
      import :: c_int, c_ptr
      type(c_ptr), intent(out) :: out
    end function
    integer(c_int) function c_model_parallel(rank, shape, names, rules, batch, out) &
        bind(c, name="kdist_model_parallel")
      import :: c_int, c_ptr, c_int64_t, c_char
      integer(c_int), value :: rank
      integer(c_int64_t), intent(in) :: shape(*)
      character(kind=c_char), intent(in) :: names(*), rules(*), batch(*)
      type(c_ptr), intent(out) :: out
    end function
    integer(c_int) function c_distribution_free(d) bind(c, name="kdist_distribution_free")
      import :: c_int, c_ptr
      type(c_ptr), value :: d
    end function
    integer(c_int) function c_model_load(path, d, seed, out) bind(c, name="kdist_model_load")
      import :: c_int, c_ptr, c_char, c_int64_t
      character(kind=c_char), intent(in) :: path(*)
      type(c_ptr), value :: d
      integer(c_int64_t), value :: seed
      type(c_ptr), intent(out) :: out
    end function
    integer(c_int) function c_model_from_json(json, d, seed, out) &
        bind(c, name="kdist_model_from_json")
      import :: c_int, c_ptr, c_char, c_int64_t
      character(kind=c_char), intent(in) :: json(*)
      type(c_ptr), value :: d
      integer(c_int64_t), value :: seed
      type(c_ptr), intent(out) :: out
    end function
    integer(c_int) function c_model_free(m) bind(c, name="kdist_model_free")
      import :: c_int, c_ptr
      type(c_ptr), value :: m
    end function
    integer(c_int) function c_input_shape(m, shape, capacity, rank) &
        bind(c, name="kdist_model_input_shape")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: m
      integer(c_int64_t), intent(out) :: shape(*)
      integer(c_int), value :: capacity
      integer(c_int), intent(out) :: rank
    end function
    integer(c_int) function c_output_size(m, n) bind(c, name="kdist_model_output_size")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: m
      integer(c_int64_t), intent(out) :: n
    end function
    integer(c_int) function c_input_rows(m, global_batch, first, count) &
        bind(c, name="kdist_model_input_rows")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: m
      integer(c_int64_t), value :: global_batch
      integer(c_int64_t), intent(out) :: first, count
    end function
    integer(c_int) function c_train_step(m, x, x_rank, x_shape, y, y_rank, y_shape, &
                                         global_batch, memory, loss) &
        bind(c, name="kdist_model_train_step")
      import :: c_int, c_ptr, c_int64_t, c_double
      type(c_ptr), value :: m, x, y
      integer(c_int), value :: x_rank, y_rank, memory
      integer(c_int64_t), intent(in) :: x_shape(*), y_shape(*)
      integer(c_int64_t), value :: global_batch
      real(c_double), intent(out) :: loss
    end function
    integer(c_int) function c_train_step_labels(m, x, x_rank, x_shape, labels, global_batch, &
                                                memory, loss, accuracy) &
        bind(c, name="kdist_model_train_step_labels")
      import :: c_int, c_ptr, c_int64_t, c_double
      type(c_ptr), value :: m, x, labels, accuracy
      integer(c_int), value :: x_rank, memory
      integer(c_int64_t), intent(in) :: x_shape(*)
      integer(c_int64_t), value :: global_batch
      real(c_double), intent(out) :: loss
    end function
    integer(c_int) function c_predict(m, x, x_rank, x_shape, global_batch, memory, out, size) &
        bind(c, name="kdist_model_predict")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: m, x, out
      integer(c_int), value :: x_rank, memory
      integer(c_int64_t), intent(in) :: x_shape(*)
      integer(c_int64_t), value :: global_batch, size
    end function
    integer(c_int) function c_model_path(m, path) bind(c)
      ! the shape of kdist_model_save, _save_weights, _load_weights, _save_checkpoint,
      ! _load_checkpoint (bound by name below)
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: m
      character(kind=c_char), intent(in) :: path(*)
    end function
    integer(c_int) function c_to_json(m, buffer, capacity, length) bind(c, name="kdist_model_to_json")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: m, buffer
      integer(c_int64_t), value :: capacity
      integer(c_int64_t), intent(out) :: length
    end function
    integer(c_int) function c_iterations(m, n) bind(c, name="kdist_model_iterations")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: m
      integer(c_int64_t), intent(out) :: n
    end function
    integer(c_int) function c_set_learning_rate(m, lr) bind(c, name="kdist_model_set_learning_rate")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: m
      real(c_double), value :: lr
    end function
  end interface

  ! The test step shares the train step's interface, the five file functions c_model_path's.
  procedure(c_train_step), bind(c, name="kdist_model_test_step") :: c_test_step
  procedure(c_model_path), bind(c, name="kdist_model_save") :: c_save
  procedure(c_model_path), bind(c, name="kdist_model_save_weights") :: c_save_weights
  procedure(c_model_path), bind(c, name="kdist_model_load_weights") :: c_load_weights
  procedure(c_model_path), bind(c, name="kdist_model_save_checkpoint") :: c_save_checkpoint
  procedure(c_model_path), bind(c, name="kdist_model_load_checkpoint") :: c_load_checkpoint

contains

  !> `s` as a C string (trailing blanks dropped, '\0' added).
  pure function c_string(s) result(out)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: out
    out = trim(s) // c_null_char
  end function

  !> The memory argument (default: host).
  pure integer(c_int) function memory_of(memory)
    integer, intent(in), optional :: memory
    memory_of = KDIST_MEMORY_HOST
    if (present(memory)) memory_of = int(memory, c_int)
  end function

  !> The C shape of a Fortran array's shape: the same extents, reversed.
  pure function reversed(s) result(out)
    integer, intent(in) :: s(:)
    integer(c_int64_t) :: out(size(s))
    integer :: d
    do d = 1, size(s)
      out(d) = int(s(size(s) + 1 - d), c_int64_t)
    end do
  end function

  !> The message of this process's last failed call ("" after a call that succeeded).
  function kdist_last_error() result(message)
    character(len=:), allocatable :: message
    character(kind=c_char), pointer :: chars(:)
    type(c_ptr) :: p
    integer :: i, n
    p = c_last_error()
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: message)
    do i = 1, n
      message(i:i) = chars(i)
    end do
  end function

  integer function initialize_f08(comm) result(status)
    type(MPI_Comm), intent(in) :: comm
    status = c_initialize_fortran(int(comm%MPI_VAL, c_int))
  end function
  integer function initialize_integer(comm) result(status)
    integer, intent(in) :: comm
    status = c_initialize_fortran(int(comm, c_int))
  end function

  !> Frees what is left and ends kdist on its communicator (before MPI_Finalize).
  integer function kdist_finalize() result(status)
    status = c_finalize()
  end function

  integer function kdist_process_id(id) result(status)
    integer, intent(out) :: id
    integer(c_int) :: c
    status = c_process_id(c)
    id = int(c)
  end function
  integer function kdist_process_count(n) result(status)
    integer, intent(out) :: n
    integer(c_int) :: c
    status = c_process_count(c)
    n = int(c)
  end function

  !> Keras' DataParallel over every process of kdist's communicator.
  integer function kdist_data_parallel(dist) result(status)
    type(kdist_distribution), intent(out) :: dist
    status = c_data_parallel(dist%handle)
  end function

  !> Keras' ModelParallel: a mesh of extents `mesh_shape` named by `axis_names`
  !> ("batch,model"), LayoutMap rules in JSON, the batch on `batch_dim_name` (default: the first).
  integer function kdist_model_parallel(dist, mesh_shape, axis_names, layout_map_json, &
                                        batch_dim_name) result(status)
    type(kdist_distribution), intent(out) :: dist
    integer, intent(in) :: mesh_shape(:)
    character(len=*), intent(in) :: axis_names, layout_map_json
    character(len=*), intent(in), optional :: batch_dim_name
    character(len=:), allocatable :: batch
    batch = ""
    if (present(batch_dim_name)) batch = batch_dim_name
    status = c_model_parallel(int(size(mesh_shape), c_int), int(mesh_shape, c_int64_t), &
                              c_string(axis_names), c_string(layout_map_json), c_string(batch), &
                              dist%handle)
  end function

  integer function kdist_distribution_free(dist) result(status)
    type(kdist_distribution), intent(inout) :: dist
    status = c_distribution_free(dist%handle)
    if (status == KDIST_OK) dist%handle = c_null_ptr
  end function

  !> The model of Keras model file `path` (.keras), compiled on `dist` with the file's weights.
  integer function kdist_model_load(model, path, dist, seed) result(status)
    type(kdist_model), intent(out) :: model
    character(len=*), intent(in) :: path
    type(kdist_distribution), intent(in) :: dist
    integer(c_int64_t), intent(in), optional :: seed
    integer(c_int64_t) :: s
    s = 0
    if (present(seed)) s = seed
    status = c_model_load(c_string(path), dist%handle, s, model%handle)
  end function

  !> The model of Keras' JSON of a compiled model, its weights initialised from `seed`.
  integer function kdist_model_from_json(model, json, dist, seed) result(status)
    type(kdist_model), intent(out) :: model
    character(len=*), intent(in) :: json
    type(kdist_distribution), intent(in) :: dist
    integer(c_int64_t), intent(in), optional :: seed
    integer(c_int64_t) :: s
    s = 0
    if (present(seed)) s = seed
    status = c_model_from_json(c_string(json), dist%handle, s, model%handle)
  end function

  integer function kdist_model_free(model) result(status)
    type(kdist_model), intent(inout) :: model
    status = c_model_free(model%handle)
    if (status == KDIST_OK) model%handle = c_null_ptr
  end function

  !> One example's input shape in Fortran's order (Keras' (8, 8, 1) is [1, 8, 8]).
  integer function kdist_input_shape(model, shape) result(status)
    type(kdist_model), intent(in) :: model
    integer, allocatable, intent(out) :: shape(:)
    integer(c_int64_t) :: c(8)
    integer(c_int) :: rank
    status = c_input_shape(model%handle, c, 8_c_int, rank)
    if (status /= KDIST_OK) return
    shape = int(c(rank:1:-1))
  end function

  integer function kdist_output_size(model, n) result(status)
    type(kdist_model), intent(in) :: model
    integer, intent(out) :: n
    integer(c_int64_t) :: c
    status = c_output_size(model%handle, c)
    n = int(c)
  end function

  !> This process's rows of a global batch: the 1-based first and the count.
  integer function kdist_input_rows(model, global_batch, first, count) result(status)
    type(kdist_model), intent(in) :: model
    integer, intent(in) :: global_batch
    integer, intent(out) :: first, count
    integer(c_int64_t) :: f, n
    status = c_input_rows(model%handle, int(global_batch, c_int64_t), f, n)
    first = int(f) + 1
    count = int(n)
  end function

  ! ---- steps: arrays of any rank (assumed-rank), the batch their last dimension ------------------

  !> One training step on this process's rows: x(features, rows), x(channels, width, height,
  !> rows) or x(channels, width, height, depth, rows); y(outputs..., rows). The global mean loss.
  integer function kdist_train_step(model, x, y, global_batch, loss, memory) result(status)
    type(kdist_model), intent(in) :: model
    real(c_float), intent(in), target, contiguous :: x(..), y(..)
    integer, intent(in) :: global_batch
    real(c_double), intent(out) :: loss
    integer, intent(in), optional :: memory
    status = on_targets(c_train_step, model, x, y, global_batch, loss, memory)
  end function

  !> The loss on this process's rows without dropout or update (Keras' test_on_batch).
  integer function kdist_test_step(model, x, y, global_batch, loss, memory) result(status)
    type(kdist_model), intent(in) :: model
    real(c_float), intent(in), target, contiguous :: x(..), y(..)
    integer, intent(in) :: global_batch
    real(c_double), intent(out) :: loss
    integer, intent(in), optional :: memory
    status = on_targets(c_test_step, model, x, y, global_batch, loss, memory)
  end function

  !> A step `fn` (the train or the test step) on x and targets y.
  integer function on_targets(fn, model, x, y, global_batch, loss, memory) result(status)
    procedure(c_train_step) :: fn
    type(kdist_model), intent(in) :: model
    real(c_float), intent(in), target, contiguous :: x(..), y(..)
    integer, intent(in) :: global_batch
    real(c_double), intent(out) :: loss
    integer, intent(in), optional :: memory
    status = fn(model%handle, c_loc(x), int(rank(x), c_int), reversed(shape(x)), c_loc(y), &
                int(rank(y), c_int), reversed(shape(y)), int(global_batch, c_int64_t), &
                memory_of(memory), loss)
  end function

  !> c_loc of an optional accuracy, or NULL.
  function accuracy_pointer(accuracy) result(p)
    real(c_double), intent(in), optional, target :: accuracy
    type(c_ptr) :: p
    p = c_null_ptr
    if (present(accuracy)) p = c_loc(accuracy)
  end function

  !> A training step on 0-based class labels(rows): the loss and (optional) the accuracy.
  integer function kdist_train_step_labels(model, x, labels, global_batch, loss, accuracy, &
                                           memory) result(status)
    type(kdist_model), intent(in) :: model
    real(c_float), intent(in), target, contiguous :: x(..)
    integer(c_int32_t), intent(in), target, contiguous :: labels(:)
    integer, intent(in) :: global_batch
    real(c_double), intent(out) :: loss
    real(c_double), intent(out), optional, target :: accuracy
    integer, intent(in), optional :: memory
    status = c_train_step_labels(model%handle, c_loc(x), int(rank(x), c_int), &
                                 reversed(shape(x)), c_loc(labels), int(global_batch, c_int64_t), &
                                 memory_of(memory), loss, accuracy_pointer(accuracy))
  end function

  !> The model's output for this process's rows into out(outputs..., rows).
  integer function kdist_predict(model, x, global_batch, out, memory) result(status)
    type(kdist_model), intent(in) :: model
    real(c_float), intent(in), target, contiguous :: x(..)
    integer, intent(in) :: global_batch
    real(c_float), intent(inout), target, contiguous :: out(..)
    integer, intent(in), optional :: memory
    status = c_predict(model%handle, c_loc(x), int(rank(x), c_int), reversed(shape(x)), &
                       int(global_batch, c_int64_t), memory_of(memory), c_loc(out), &
                       int(size(out), c_int64_t))
  end function

  ! ---- files ---------------------------------------------------------------------------------

  !> Keras model file (.keras).
  integer function kdist_save(model, path) result(status)
    type(kdist_model), intent(in) :: model
    character(len=*), intent(in) :: path
    status = c_save(model%handle, c_string(path))
  end function
  !> Keras weights file (.weights.h5, with the optimizer's state).
  integer function kdist_save_weights(model, path) result(status)
    type(kdist_model), intent(in) :: model
    character(len=*), intent(in) :: path
    status = c_save_weights(model%handle, c_string(path))
  end function
  integer function kdist_load_weights(model, path) result(status)
    type(kdist_model), intent(in) :: model
    character(len=*), intent(in) :: path
    status = c_load_weights(model%handle, c_string(path))
  end function
  !> kdist's sharded, checksummed checkpoint.
  integer function kdist_save_checkpoint(model, path) result(status)
    type(kdist_model), intent(in) :: model
    character(len=*), intent(in) :: path
    status = c_save_checkpoint(model%handle, c_string(path))
  end function
  integer function kdist_load_checkpoint(model, path) result(status)
    type(kdist_model), intent(in) :: model
    character(len=*), intent(in) :: path
    status = c_load_checkpoint(model%handle, c_string(path))
  end function

  !> Keras' model.to_json() of the model.
  integer function kdist_to_json(model, json) result(status)
    type(kdist_model), intent(in) :: model
    character(len=:), allocatable, intent(out) :: json
    character(kind=c_char), allocatable, target :: buffer(:)
    integer(c_int64_t) :: length, capacity
    integer :: i
    status = c_to_json(model%handle, c_null_ptr, 0_c_int64_t, length)
    if (status /= KDIST_OK) return
    capacity = length + 1
    allocate (buffer(capacity))
    status = c_to_json(model%handle, c_loc(buffer), capacity, length)
    if (status /= KDIST_OK) return
    allocate (character(len=length) :: json)
    do i = 1, int(length)
      json(i:i) = buffer(i)
    end do
  end function

  integer function kdist_iterations(model, n) result(status)
    type(kdist_model), intent(in) :: model
    integer(c_int64_t), intent(out) :: n
    status = c_iterations(model%handle, n)
  end function

  integer function kdist_set_learning_rate(model, learning_rate) result(status)
    type(kdist_model), intent(in) :: model
    real(c_double), intent(in) :: learning_rate
    status = c_set_learning_rate(model%handle, learning_rate)
  end function

end module kdist
