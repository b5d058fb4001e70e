! A Fortran main program for the mpi tests: MPI from Fortran, CUDA through C functions
! (fortran_cuda.cu).  Built twice by mpif90 -cpp: with `use mpi` and, with -DFUNNEL_F08,
! with `use mpi_f08`; linked with -lfunnel_mpi, whose mpi_init_ / mpi_init_f08_ (and the
! _thread_ and finalize names) must be the ones called for the server to start at MPI_Init
! and stop at MPI_Finalize.
!   fortran_main init|init_thread normal
! Rank 0 prints "K of N ranks ok" (lifecycle.sh's normal checks).
program fortran_main
#ifdef FUNNEL_F08
  use mpi_f08
#else
  use mpi
#endif
  use, intrinsic :: iso_c_binding, only: c_int
  implicit none
  interface
    integer(c_int) function fcuda_roundtrip(rank, round) bind(C, name="fcuda_roundtrip")
      import :: c_int
      integer(c_int), value :: rank, round
    end function
  end interface
  character(len=32) :: how, mode
  integer :: ierr, provided, rank, nranks, ok, total, failed

  call get_command_argument(1, how)
  call get_command_argument(2, mode)
  if (mode /= "normal") then
    print '(A,A)', "FAIL: fortran_main runs only the normal scenario, not ", trim(mode)
    stop 2
  end if
  ierr = -1
  if (how == "init") then
    call MPI_Init(ierr)
  else if (how == "init_thread") then
    provided = -1
    call MPI_Init_thread(MPI_THREAD_FUNNELED, provided, ierr)
    if (provided < MPI_THREAD_SINGLE .or. provided > MPI_THREAD_MULTIPLE) then
      print '(A,I0)', "FAIL: MPI_Init_thread provided ", provided
      stop 1
    end if
  else
    print '(A,A)', "FAIL: expected init or init_thread, not ", trim(how)
    stop 2
  end if
  if (ierr /= MPI_SUCCESS) then
    print '(A,I0)', "FAIL: MPI_Init returned ", ierr
    stop 1
  end if
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  failed = fcuda_roundtrip(rank, 1)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  failed = failed + fcuda_roundtrip(rank, 2)
  ok = merge(1, 0, failed == 0)
  total = 0
  call MPI_Reduce(ok, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(I0,A,I0,A)', total, " of ", nranks, " ranks ok"

#ifdef FUNNEL_F08
  call MPI_Finalize()  ! ierror is optional here: the hook gets a null pointer
#else
  ierr = -1
  call MPI_Finalize(ierr)
  if (ierr /= MPI_SUCCESS) then
    print '(A,I0)', "FAIL: MPI_Finalize returned ", ierr
    stop 1
  end if
#endif
end program fortran_main
