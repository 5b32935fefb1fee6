// The key under which a kernel is matched between a running program and a
// profile: the demangled, fully qualified function name without return type,
// template arguments or parameters. cuFuncGetName and CUPTI give mangled
// names ("_ZN2at6native...Ev"), Nsight Compute and Orion's profiles give
// demangled ones ("void at::native::vectorized_elementwise_kernel<4, ...>(...)")
// or base names; all of them map to "at::native::vectorized_elementwise_kernel".
#pragma once

#include <string>
#include <string_view>

namespace fleet::orion {

/// Matching key of a kernel name (see above). Names that are not C++ symbols stay as they are.
std::string kernel_name_key(std::string_view name);

}  // namespace fleet::orion
