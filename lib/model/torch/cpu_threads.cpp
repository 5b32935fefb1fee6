#include "model/torch/cpu_threads.h"

#include <dlfcn.h>

#include <vector>

#include <torch/torch.h>

#include "common/error.h"

namespace fleet::model {

void set_cpu_threads(int threads) {
  if (threads < 0) throw UsageError("--threads must be >= 0");
  if (threads == 0) return;
  torch::set_num_threads(threads);
  // Debian's libtorch hands matrix products to the system BLAS. OpenBLAS keeps
  // its own thread pool that torch::set_num_threads does not reach, so a
  // "one thread" run would still use every core (and sum in a core-count
  // dependent order). Its setter is found at run time: the BLAS behind
  // libblas.so.3 is chosen by the system, not at link time.
  using SetThreads = void (*)(int);
  std::vector<void*> scopes = {RTLD_DEFAULT};
  for (const char* library : {"libblas.so.3", "libopenblas.so.0"}) {  // when loaded without RTLD_GLOBAL
    if (void* handle = ::dlopen(library, RTLD_LAZY | RTLD_NOLOAD)) scopes.push_back(handle);
  }
  for (void* scope : scopes) {
    if (auto* set = reinterpret_cast<SetThreads>(::dlsym(scope, "openblas_set_num_threads"))) {
      set(threads);
      break;
    }
  }
  for (std::size_t i = 1; i < scopes.size(); ++i) ::dlclose(scopes[i]);  // drops the references NOLOAD took
}

}  // namespace fleet::model
