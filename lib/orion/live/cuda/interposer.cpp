// liborion_client.so: loaded with LD_PRELOAD into every program `orion-run
// exec` starts. It catches kernel launches at the CUDA driver API and asks
// the scheduler (through ClientGate) before a best-effort launch reaches the
// GPU. docs/orion-live.md has the architecture.
//
// Three routes lead a program to the driver, and all three are covered:
//  1. calls to symbols it linked against (cuLaunchKernel, ...): this library,
//     preloaded, defines the same symbols first;
//  2. dlsym(handle_of_libcuda, "cu...") after dlopen("libcuda.so.1"): we
//     define dlsym too and hand out our wrappers;
//  3. cuGetProcAddress, which the CUDA 12/13 runtime (shared or static),
//     cuBLAS and cuDNN use for every driver entry point: its answers are
//     wrapped the same way.
// A wrapper for a real entry point is picked from a small table of template
// instances, one per distinct real function pointer, so the default-stream,
// per-thread-stream and versioned variants each keep calling their own real
// function.
#define __CUDA_API_VERSION_INTERNAL 1  // plain symbol names, every ABI version declared
#include <cuda.h>
#include <cudaProfiler.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "orion/live/client_gate.h"
#include "orion/kernel_name.h"

namespace fleet::orion::live {
namespace {

using DlsymFn = void* (*)(void*, const char*);
using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**);
using LaunchKernelExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProcAddressV1Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
using ProfilerFn = CUresult (*)();
using StreamCreateFn = CUresult (*)(CUstream*, unsigned);
using StreamCreateWithPriorityFn = CUresult (*)(CUstream*, unsigned, int);

// ---------------------------------------------------------------- symbol lookup

DlsymFn real_dlsym() {
  static DlsymFn fn = [] {
    auto f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
    if (f == nullptr) f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
    return f;
  }();
  return fn;
}

// A driver function for our own use or as the "next" definition of an
// exported hook: from the global scope after us, else from libcuda itself
// (the runtime may have loaded it privately with RTLD_LOCAL).
void* driver_symbol(const char* name) {
  void* p = real_dlsym()(RTLD_NEXT, name);
  if (p != nullptr) return p;
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  p = real_dlsym()(handle, name);
  dlclose(handle);
  return p;
}

template <class Fn>
Fn driver(const char* name) {
  return reinterpret_cast<Fn>(driver_symbol(name));
}

// dlsym(RTLD_NEXT, ...) depends on who calls it; forwarded from our dlsym the
// caller would be this library. Resolve it as the caller would have: the
// first object after the caller's, in load order, that defines the symbol.
struct NextLookup {
  const void* caller_base;
  const char* name;
  bool passed_caller = false;
  void* result = nullptr;
};

int find_next_definition(struct dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<NextLookup*>(data);
  const void* base = reinterpret_cast<const void*>(info->dlpi_addr);
  if (!q->passed_caller) {
    q->passed_caller = base == q->caller_base;
    return 0;
  }
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  void* handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return 0;
  void* sym = real_dlsym()(handle, q->name);
  dlclose(handle);
  Dl_info where{};
  if (sym != nullptr && dladdr(sym, &where) != 0 && where.dli_fbase == reinterpret_cast<void*>(info->dlpi_addr)) {
    q->result = sym;
    return 1;
  }
  return 0;
}

void* resolve_next_for(const void* caller, const char* name) {
  Dl_info info{};
  if (dladdr(caller, &info) == 0) return real_dlsym()(RTLD_NEXT, name);
  NextLookup q{info.dli_fbase, name};
  dl_iterate_phdr(find_next_definition, &q);
  return q.result;
}

// ---------------------------------------------------------------- the gate

ClientGate& gate();

// A process that exits normally tells the scheduler so; one that is killed
// is found by its pid and counted as lost.
__attribute__((destructor)) void leave_cleanly() { gate().leave(); }

ClientGate& gate() {
  static ClientGate* g = [] {
    auto* created = new ClientGate();  // never destroyed: launches may run during exit
    pthread_atfork(nullptr, nullptr, [] { gate().forget(); });
    return created;
  }();
  return *g;
}

// Kernel name index per CUfunction, filled on a function's first launch.
std::uint32_t name_index_of(CUfunction f) {
  static std::mutex mutex;
  static auto* names = new std::unordered_map<CUfunction, std::uint32_t>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = names->find(f);
    if (it != names->end()) return it->second;
  }
  static auto get_name = driver<CUresult (*)(const char**, CUfunction)>("cuFuncGetName");
  const char* raw = nullptr;
  if (get_name == nullptr || get_name(&raw, f) != CUDA_SUCCESS || raw == nullptr) raw = "unknown";
  const std::uint32_t index = gate().intern_name(kernel_name_key(raw));
  std::lock_guard<std::mutex> lock(mutex);
  names->emplace(f, index);
  return index;
}

// Reports launches that went through the scheduler complete, with events
// recorded behind them. A stream has at most one event in flight: launches
// made while it is pending wait for it to fire, and the completion thread
// then records one event behind all of them (from its own thread, which is
// valid for every stream but a thread's per-thread default stream; launches
// there get an event each). So a launch-bound client pays for an event
// record about once per burst of launches, not once per launch.
class CompletionTracker {
 public:
  void track(LaunchEntry* entry, CUstream stream, bool per_thread_stream) {
    static auto ctx_get = driver<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
    CUcontext ctx = nullptr;
    if (ctx_get != nullptr) ctx_get(&ctx);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!per_thread_stream) {
      for (Pending& p : pending_) {
        if (p.stream == stream && p.ctx == ctx && p.shared) {
          p.waiting.push_back(entry);  // covered by the next event, recorded when this one fires
          return;
        }
      }
    }
    Pending p{stream, ctx, nullptr, {entry}, {}, !per_thread_stream};
    if (!record(p)) return;
    pending_.push_back(std::move(p));
    if (!thread_started_) {
      thread_started_ = true;
      std::thread([this] { loop(); }).detach();
    }
    wake_.notify_one();
  }

 private:
  struct Pending {
    CUstream stream;
    CUcontext ctx;
    CUevent event;
    std::vector<LaunchEntry*> covered;  ///< launched before `event` was recorded
    std::vector<LaunchEntry*> waiting;  ///< launched since: need the next event
    bool shared;                        ///< later launches on the stream may join (not a per-thread stream)
  };

  // Records p.event behind p.covered (mutex held); on failure reports them
  // done rather than block the scheduler, and returns false.
  bool record(Pending& p) {
    static auto event_create = driver<CUresult (*)(CUevent*, unsigned)>("cuEventCreate");
    static auto event_record = driver<CUresult (*)(CUevent, CUstream)>("cuEventRecord");
    if (pool_.empty()) {
      CUevent created = nullptr;
      if (event_create != nullptr &&
          event_create(&created, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC) == CUDA_SUCCESS) {
        pool_.push_back(created);
      }
    }
    if (!pool_.empty() && event_record != nullptr && event_record(pool_.back(), p.stream) == CUDA_SUCCESS) {
      p.event = pool_.back();
      pool_.pop_back();
      return true;
    }
    for (LaunchEntry* e : p.covered) gate().completed(e);
    return false;
  }

  void loop() {
    static auto ctx_set = driver<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
    static auto event_sync = driver<CUresult (*)(CUevent)>("cuEventSynchronize");
    static auto event_query = driver<CUresult (*)(CUevent)>("cuEventQuery");
    CUcontext current = nullptr;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return !pending_.empty(); });
      const CUevent oldest = pending_.front().event;
      const CUcontext ctx = pending_.front().ctx;
      lock.unlock();
      if (ctx != current && ctx_set != nullptr) {
        ctx_set(ctx);
        current = ctx;
      }
      event_sync(oldest);  // blocking-sync event: sleeps, does not spin
      lock.lock();
      // Events on other streams may have fired first: handle every one that has.
      std::vector<Pending> next_events;
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->event != oldest && event_query(it->event) == CUDA_ERROR_NOT_READY) {
          ++it;
          continue;
        }
        for (LaunchEntry* e : it->covered) gate().completed(e);
        pool_.push_back(it->event);
        if (it->waiting.empty()) {
          it = pending_.erase(it);
          continue;
        }
        // One event behind everything launched on the stream meanwhile.
        next_events.push_back(Pending{it->stream, it->ctx, nullptr, std::move(it->waiting), {}, it->shared});
        it = pending_.erase(it);
      }
      for (Pending& next : next_events) {
        if (next.ctx != current && ctx_set != nullptr) {
          ctx_set(next.ctx);
          current = next.ctx;
        }
        if (record(next)) pending_.push_back(std::move(next));
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  std::vector<CUevent> pool_;
  bool thread_started_ = false;
};

CompletionTracker& tracker() {
  static auto* t = new CompletionTracker();  // never destroyed (its thread outlives main)
  return *t;
}

bool stream_capturing(CUstream stream) {
  static auto is_capturing = driver<CUresult (*)(CUstream, CUstreamCaptureStatus*)>("cuStreamIsCapturing");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing != nullptr && is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// The launch path shared by every launch entry point.
// `per_thread`: the entry point is a per-thread-default-stream variant
// (`_ptsz`), where stream 0 means this thread's default stream: the
// completion event must go there too.
template <class Call>
CUresult gated_launch(CUfunction f, const LaunchGeometry& geometry, CUstream stream, bool per_thread, Call&& call) {
  if (stream == nullptr && per_thread) stream = CU_STREAM_PER_THREAD;
  ClientGate& g = gate();
  // Launches captured into a CUDA graph run later, through cuGraphLaunch: not gated.
  if (!g.connect_from_environment() || stream_capturing(stream)) return call();
  LaunchEntry* entry = g.before_launch(name_index_of(f), geometry);
  const CUresult result = call();
  if (entry == nullptr) return result;
  g.after_launch(entry, result == CUDA_SUCCESS);
  // An event behind the launch reports its completion, except for HP launches
  // inside a marked request: their request's end marker does (an event per
  // launch or burst cost a launch-bound PyTorch client ~0.27 ms per 36-kernel
  // request on an H200, against ~0.02 ms without).
  if (result == CUDA_SUCCESS && !g.defer_completion(entry)) {
    tracker().track(entry, stream, stream == CU_STREAM_PER_THREAD);
  }
  return result;
}

CUresult launch_kernel(LaunchKernelFn real, bool per_thread, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                       unsigned bx, unsigned by, unsigned bz, unsigned shared, CUstream stream, void** params,
                       void** extra) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const LaunchGeometry geometry{std::uint64_t{gx} * gy * gz, bx * by * bz, shared};
  return gated_launch(f, geometry, stream, per_thread,
                      [&] { return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra); });
}

CUresult launch_kernel_ex(LaunchKernelExFn real, bool per_thread, const CUlaunchConfig* config, CUfunction f,
                          void** params, void** extra) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (config == nullptr) return real(config, f, params, extra);
  const LaunchGeometry geometry{std::uint64_t{config->gridDimX} * config->gridDimY * config->gridDimZ,
                                config->blockDimX * config->blockDimY * config->blockDimZ, config->sharedMemBytes};
  return gated_launch(f, geometry, config->hStream, per_thread, [&] { return real(config, f, params, extra); });
}

CUresult profiler_marker(ProfilerFn real, EntryKind kind) {
  if (gate().connect_from_environment()) gate().marker(kind);
  return real != nullptr ? real() : CUDA_SUCCESS;
}

int boosted_priority(int requested) {
  if (!gate().connect_from_environment() || !gate().boost_streams()) return requested;
  static auto range = driver<CUresult (*)(int*, int*)>("cuCtxGetStreamPriorityRange");
  int least = 0, greatest = 0;
  if (range == nullptr || range(&least, &greatest) != CUDA_SUCCESS) return requested;
  return greatest;
}

CUresult stream_create(StreamCreateFn real, CUstream* stream, unsigned flags) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (gate().connect_from_environment() && gate().boost_streams()) {
    static auto with_priority = driver<StreamCreateWithPriorityFn>("cuStreamCreateWithPriority");
    if (with_priority != nullptr) return with_priority(stream, flags, boosted_priority(0));
  }
  return real(stream, flags);
}

CUresult stream_create_with_priority(StreamCreateWithPriorityFn real, CUstream* stream, unsigned flags, int priority) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return real(stream, flags, boosted_priority(priority));
}

// ---------------------------------------------------------------- wrapper tables

constexpr std::size_t kVariants = 8;  // distinct real pointers per entry point

template <class Fn>
struct Variants {
  std::array<std::atomic<Fn>, kVariants> real{};
  std::array<std::atomic<bool>, kVariants> per_thread{};  ///< a per-thread-default-stream variant
  std::mutex mutex;
};

// True for an address inside this library: a "real" entry point that is one
// of our own hooks (a driver whose function table resolves through the
// global scope hands them back) must not be wrapped a second time.
bool is_ours(const void* address) {
  static const void* our_base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<const void*>(&real_dlsym), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  Dl_info info{};
  return our_base != nullptr && dladdr(address, &info) != 0 && info.dli_fbase == our_base;
}

template <class Fn, std::size_t N>
Fn pick(Variants<Fn>& v, Fn real, const std::array<Fn, N>& hooks, bool per_thread) {
  if (real == nullptr || is_ours(reinterpret_cast<const void*>(real))) return real;
  std::lock_guard<std::mutex> lock(v.mutex);
  for (std::size_t i = 0; i < N; ++i) {
    Fn current = v.real[i].load();
    if (current == real) return hooks[i];
    if (current == nullptr) {
      v.per_thread[i].store(per_thread);
      v.real[i].store(real);
      return hooks[i];
    }
  }
  return real;  // more variants than slots: leave this one unwrapped
}

Variants<LaunchKernelFn> launch_variants;
Variants<LaunchKernelExFn> launch_ex_variants;
Variants<ProfilerFn> start_variants, stop_variants;
Variants<StreamCreateFn> stream_variants;
Variants<StreamCreateWithPriorityFn> stream_priority_variants;
Variants<GetProcAddressFn> proc_variants;
Variants<GetProcAddressV1Fn> proc_v1_variants;

void* wrap_symbol(const char* name, void* real, bool per_thread = false);
void* wrap_proc_answer(const char* name, void* real, int version, cuuint64_t flags);

template <std::size_t I>
CUresult launch_hook(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                     unsigned shared, CUstream s, void** p, void** e) {
  return launch_kernel(launch_variants.real[I].load(), launch_variants.per_thread[I].load(), f, gx, gy, gz, bx, by, bz,
                       shared, s, p, e);
}
template <std::size_t I>
CUresult launch_ex_hook(const CUlaunchConfig* c, CUfunction f, void** p, void** e) {
  return launch_kernel_ex(launch_ex_variants.real[I].load(), launch_ex_variants.per_thread[I].load(), c, f, p, e);
}
template <std::size_t I>
CUresult start_hook() {
  return profiler_marker(start_variants.real[I].load(), kRequestBegin);
}
template <std::size_t I>
CUresult stop_hook() {
  return profiler_marker(stop_variants.real[I].load(), kRequestEnd);
}
template <std::size_t I>
CUresult stream_hook(CUstream* s, unsigned flags) {
  return stream_create(stream_variants.real[I].load(), s, flags);
}
template <std::size_t I>
CUresult stream_priority_hook(CUstream* s, unsigned flags, int priority) {
  return stream_create_with_priority(stream_priority_variants.real[I].load(), s, flags, priority);
}
template <std::size_t I>
CUresult proc_hook(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* st) {
  GetProcAddressFn real = proc_variants.real[I].load();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(symbol, pfn, version, flags, st);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = wrap_proc_answer(symbol, *pfn, version, flags);
  return r;
}
template <std::size_t I>
CUresult proc_v1_hook(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  GetProcAddressV1Fn real = proc_v1_variants.real[I].load();
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = wrap_proc_answer(symbol, *pfn, version, flags);
  return r;
}

template <class Fn, template <std::size_t> class Hook, std::size_t... I>
constexpr std::array<Fn, sizeof...(I)> hook_table(std::index_sequence<I...>) {
  return {Hook<I>::fn...};
}

#define FLEET_HOOK_TABLE(name, Fn, hook) \
  template <std::size_t I>               \
  struct name##_at {                     \
    static constexpr Fn fn = &hook<I>;   \
  };                                     \
  const std::array<Fn, kVariants> name = hook_table<Fn, name##_at>(std::make_index_sequence<kVariants>{});

FLEET_HOOK_TABLE(launch_hooks, LaunchKernelFn, launch_hook)
FLEET_HOOK_TABLE(launch_ex_hooks, LaunchKernelExFn, launch_ex_hook)
FLEET_HOOK_TABLE(start_hooks, ProfilerFn, start_hook)
FLEET_HOOK_TABLE(stop_hooks, ProfilerFn, stop_hook)
FLEET_HOOK_TABLE(stream_hooks, StreamCreateFn, stream_hook)
FLEET_HOOK_TABLE(stream_priority_hooks, StreamCreateWithPriorityFn, stream_priority_hook)
FLEET_HOOK_TABLE(proc_hooks, GetProcAddressFn, proc_hook)
FLEET_HOOK_TABLE(proc_v1_hooks, GetProcAddressV1Fn, proc_v1_hook)
#undef FLEET_HOOK_TABLE

bool named(const char* name, const char* base) {
  // "cuLaunchKernel" and its per-thread-stream twin "cuLaunchKernel_ptsz".
  const std::size_t n = std::strlen(base);
  return std::strncmp(name, base, n) == 0 && (name[n] == '\0' || std::strcmp(name + n, "_ptsz") == 0);
}

template <class Fn, std::size_t N>
void* wrap_as(Variants<Fn>& v, void* real, const std::array<Fn, N>& hooks, bool per_thread = false) {
  return reinterpret_cast<void*>(pick(v, reinterpret_cast<Fn>(real), hooks, per_thread));
}

bool ends_with_ptsz(const char* name) {
  const std::size_t n = std::strlen(name);
  return n > 5 && std::strcmp(name + n - 5, "_ptsz") == 0;
}

void* wrap_symbol(const char* name, void* real, bool per_thread) {
  if (name == nullptr || real == nullptr || name[0] != 'c' || name[1] != 'u') return real;
  per_thread = per_thread || ends_with_ptsz(name);
  if (named(name, "cuLaunchKernel")) return wrap_as(launch_variants, real, launch_hooks, per_thread);
  if (named(name, "cuLaunchKernelEx")) return wrap_as(launch_ex_variants, real, launch_ex_hooks, per_thread);
  if (std::strcmp(name, "cuGetProcAddress_v2") == 0) return wrap_as(proc_variants, real, proc_hooks);
  if (std::strcmp(name, "cuGetProcAddress") == 0) return wrap_as(proc_v1_variants, real, proc_v1_hooks);
  if (std::strcmp(name, "cuProfilerStart") == 0) return wrap_as(start_variants, real, start_hooks);
  if (std::strcmp(name, "cuProfilerStop") == 0) return wrap_as(stop_variants, real, stop_hooks);
  if (named(name, "cuStreamCreate")) return wrap_as(stream_variants, real, stream_hooks);
  if (named(name, "cuStreamCreateWithPriority")) return wrap_as(stream_priority_variants, real, stream_priority_hooks);
  return real;
}

// Through cuGetProcAddress the name "cuGetProcAddress" means the ABI of the
// CUDA version asked for (five arguments from 12.0); by dlsym it is the
// legacy four-argument one.
void* wrap_proc_answer(const char* name, void* real, int version, cuuint64_t flags) {
  if (name != nullptr && std::strcmp(name, "cuGetProcAddress") == 0 && version >= 12000) {
    return wrap_as(proc_variants, real, proc_hooks);
  }
  return wrap_symbol(name, real, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
}

}  // namespace
}  // namespace fleet::orion::live

using namespace fleet::orion::live;

// ---------------------------------------------------------------- exported symbols

extern "C" {

__attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  DlsymFn real = real_dlsym();
  void* result = handle == RTLD_NEXT ? resolve_next_for(__builtin_return_address(0), name) : real(handle, name);
  return wrap_symbol(name, result);
}

#define FLEET_EXPORT __attribute__((visibility("default")))

FLEET_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shared, CUstream s, void** p, void** e) {
  static auto real = driver<LaunchKernelFn>("cuLaunchKernel");
  return launch_kernel(real, false, f, gx, gy, gz, bx, by, bz, shared, s, p, e);
}
FLEET_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                          unsigned bz, unsigned shared, CUstream s, void** p, void** e) {
  static auto real = driver<LaunchKernelFn>("cuLaunchKernel_ptsz");
  return launch_kernel(real, true, f, gx, gy, gz, bx, by, bz, shared, s, p, e);
}
FLEET_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** p, void** e) {
  static auto real = driver<LaunchKernelExFn>("cuLaunchKernelEx");
  return launch_kernel_ex(real, false, c, f, p, e);
}
FLEET_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** p, void** e) {
  static auto real = driver<LaunchKernelExFn>("cuLaunchKernelEx_ptsz");
  return launch_kernel_ex(real, true, c, f, p, e);
}
FLEET_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status) {
  static auto real = driver<GetProcAddressFn>("cuGetProcAddress_v2");
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = wrap_proc_answer(symbol, *pfn, version, flags);
  return r;
}
FLEET_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  static auto real = driver<GetProcAddressV1Fn>("cuGetProcAddress");
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = wrap_proc_answer(symbol, *pfn, version, flags);
  return r;
}
FLEET_EXPORT CUresult cuProfilerStart() {
  static auto real = driver<ProfilerFn>("cuProfilerStart");
  return profiler_marker(real, kRequestBegin);
}
FLEET_EXPORT CUresult cuProfilerStop() {
  static auto real = driver<ProfilerFn>("cuProfilerStop");
  return profiler_marker(real, kRequestEnd);
}
FLEET_EXPORT CUresult cuStreamCreate(CUstream* s, unsigned flags) {
  static auto real = driver<StreamCreateFn>("cuStreamCreate");
  return stream_create(real, s, flags);
}
FLEET_EXPORT CUresult cuStreamCreateWithPriority(CUstream* s, unsigned flags, int priority) {
  static auto real = driver<StreamCreateWithPriorityFn>("cuStreamCreateWithPriority");
  return stream_create_with_priority(real, s, flags, priority);
}

}  // extern "C"
