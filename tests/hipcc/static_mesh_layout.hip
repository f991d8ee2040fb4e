// tests/nvcc/static_mesh_layout.cu compiled by plain hipcc (tests/hipcc.cmake), linked and run on
// the host: under HIP a __global__ function needs the HIP runtime's declarations first.
#include <hip/hip_runtime.h>
#define KDIST_STATIC_PROGRAM_COMPILER "hipcc"
#include "../nvcc/static_mesh_layout.cu"
