// The CUDA side of the Fortran test program (fortran_main.F90): C functions it calls
// through bind(C), built with nvcc -c and linked by mpif90 with -lcudart (the shared runtime).
#include "round_trip.h"

// 0 when the round trip came back intact.
extern "C" int fcuda_roundtrip(int rank, int round) { return round_trip(rank, round); }
