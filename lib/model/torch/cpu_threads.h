// How many CPU threads libtorch and the BLAS behind it use.
// Torch-free header: the programs include it, the .cpp uses libtorch.
#pragma once

namespace fleet::model {

/// Sets the CPU threads of libtorch and of the BLAS it calls (OpenBLAS keeps its
/// own pool); 0 keeps the defaults; UsageError when negative.
void set_cpu_threads(int threads);

}  // namespace fleet::model
