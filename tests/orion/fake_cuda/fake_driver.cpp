// A stand-in for libcuda.so.1, built only for tests and never installed: the
// subset of the driver API that the interposer intercepts and the test
// programs use, on a virtual device of this process. Streams execute their
// work in order; a kernel waits for its SM need to be free, then occupies it
// for the duration the launch asks for, in real time; events and
// synchronisation behave as on a GPU. Kernels do arithmetic on device
// buffers (host memory here), so results can be checked by checksum.
//
// Every fake kernel has the same parameters, in kernelParams order:
//   CUdeviceptr buffer, uint64 elements, uint64 seed, uint64 duration_ns
// and computes buffer[i] = mix(buffer[i] + seed + i) for i < elements.
// Environment: FAKE_CUDA_SMS (SM count, default 132), FAKE_CUDA_LOG (a file
// that gets one line per kernel start: "<name> <grid> <block>", one
// "event-record" line per cuEventRecord and one "ctx-sync" line per
// cuCtxSynchronize call), FAKE_CUDA_HOLD (a path: while a file exists there,
// no started kernel finishes, so a test can hold the device busy for as long
// as it needs instead of counting on timing),
// FAKE_CUDA_SHARED_DEVICE (a file: processes naming the same file share one
// pool of SMs, as processes under MPS share a GPU; without it each process
// has a device of its own), FAKE_CUDA_DISPATCH (`whole`, the default: a
// kernel starts once all the SMs it needs are free; `blocks`: as a GPU's
// block scheduler, a kernel starts on the SMs that are free and takes more
// as they free up, running at the rate of the SMs it holds, and free SMs go
// to the waiting kernels in order of stream priority, then of arrival,
// across the processes that share the device).
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct CUfunc_st {
  std::string name;
};
struct CUmod_st {
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
};
struct CUevent_st {
  std::uint64_t recorded = 0;   // records enqueued
  std::uint64_t completed = 0;  // records reached
};
struct CUstream_st {
  int priority = 0;
};
struct CUctx_st {};

namespace {

using Clock = std::chrono::steady_clock;

struct Op {
  enum Kind { kKernel, kCopy, kEvent } kind = kKernel;
  // kernel
  CUfunc_st* function = nullptr;
  std::uint64_t grid = 1;
  unsigned block = 1;
  std::uint64_t* buffer = nullptr;
  std::uint64_t elements = 0, seed = 0, duration_ns = 0;
  int sms = 1;
  int priority = 0;  // of its stream (lower goes first, as in CUDA)
  bool started = false;
  Clock::time_point end{};
  // block dispatch (FAKE_CUDA_DISPATCH=blocks)
  bool ready = false;            // at the head of its stream, waiting or running
  std::int64_t key = 0;          // its place among the waiting kernels (lower goes first)
  int held = 0;                  // SMs it holds
  double work_left = 0;          // SM-nanoseconds still to run
  Clock::time_point last{};      // when work_left was last brought up to date
  // copy
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  // event
  CUevent_st* event = nullptr;
  std::uint64_t event_record = 0;
};

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// SMs shared by the processes that name the same file. Each process books
// the SMs its kernels hold under its pid, so that those of a process that
// died with kernels on the device return to the pool, as a GPU frees the
// resources of a dead process's context: otherwise one killed client would
// leave the others waiting forever for SMs nobody will give back.
struct SharedPool {
  static constexpr int kHolders = 64;
  struct Holder {
    std::atomic<int> pid;  // 0: free, -1: being reclaimed
    std::atomic<int> sms;  // SMs its running kernels hold
    std::atomic<std::int64_t> waiting_key;  // its first kernel waiting for SMs (0: none), block dispatch
  };
  std::atomic<std::uint32_t> initialised;
  std::atomic<int> free_sms;
  Holder holders[kHolders];
};

bool process_gone(int pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

// Frees holder `h` if its process is gone, returning its SMs to the pool.
bool reclaim_if_gone(SharedPool& pool, SharedPool::Holder& h) {
  int pid = h.pid.load();
  if (!process_gone(pid) || !h.pid.compare_exchange_strong(pid, -1)) return false;
  pool.free_sms.fetch_add(h.sms.exchange(0));
  h.waiting_key.store(0);
  h.pid.store(0);
  return true;
}

class Device {
 public:
  Device() {
    const char* sms = std::getenv("FAKE_CUDA_SMS");
    sm_count_ = sms != nullptr ? std::max(1, std::atoi(sms)) : 132;
    free_sms_ = sm_count_;
    if (const char* log = std::getenv("FAKE_CUDA_LOG")) log_ = std::fopen(log, "a");
    if (const char* hold = std::getenv("FAKE_CUDA_HOLD")) hold_ = hold;
    if (const char* dispatch = std::getenv("FAKE_CUDA_DISPATCH")) blocks_ = std::string(dispatch) == "blocks";
    if (const char* shared = std::getenv("FAKE_CUDA_SHARED_DEVICE")) {
      const int fd = ::open(shared, O_RDWR | O_CREAT, 0600);
      if (fd >= 0 && ftruncate(fd, sizeof(SharedPool)) == 0) {
        void* p = mmap(nullptr, sizeof(SharedPool), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          pool_ = static_cast<SharedPool*>(p);
          std::uint32_t expected = 0;
          if (pool_->initialised.compare_exchange_strong(expected, 1)) pool_->free_sms.store(sm_count_);
          book_holder();
        }
      }
      if (fd >= 0) ::close(fd);
    }
    std::thread([this] { run(); }).detach();
  }
  int sm_count() const { return sm_count_; }

  void enqueue(CUstream stream, Op op) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (op.kind == Op::kEvent) {
      op.event_record = ++op.event->recorded;
      if (log_ != nullptr) {
        std::fprintf(log_, "event-record\n");
        std::fflush(log_);
      }
    }
    queues_[stream].push_back(op);
    changed_.notify_all();
  }
  void synchronize(CUstream stream) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return queues_[stream].empty(); });
  }
  void synchronize_all() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (log_ != nullptr) {
      std::fprintf(log_, "ctx-sync\n");
      std::fflush(log_);
    }
    done_.wait(lock, [&] {
      return std::all_of(queues_.begin(), queues_.end(), [](const auto& q) { return q.second.empty(); });
    });
  }
  bool event_done(CUevent_st* e) {
    std::lock_guard<std::mutex> lock(mutex_);
    return e->completed >= e->recorded;
  }
  void event_wait(CUevent_st* e) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return e->completed >= e->recorded; });
  }
  int kernel_sms(std::uint64_t grid, unsigned block) const {
    const std::uint64_t per_sm = std::max<std::uint64_t>(1, std::min<std::uint64_t>(32, 2048 / std::max(1u, block)));
    return static_cast<int>(std::clamp<std::uint64_t>((grid + per_sm - 1) / per_sm, 1, sm_count_));
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      const Clock::time_point now = Clock::now();
      Clock::time_point next = now + std::chrono::seconds(1);
      bool finished_any = false;
      if (blocks_) publish_waiting(now);
      for (auto& [stream, queue] : queues_) {
        while (!queue.empty()) {
          Op& op = queue.front();
          if (op.kind == Op::kKernel && blocks_) {
            if (!advance_blocks(op, now, next)) break;
          } else if (op.kind == Op::kKernel) {
            if (!op.started) {
              if (!take_sms(op.sms)) {  // waits for SMs held by other streams' (or processes') kernels
                if (pool_ != nullptr) next = std::min(next, now + std::chrono::microseconds(50));
                break;
              }
              op.end = now + std::chrono::nanoseconds(op.duration_ns);
              start_kernel(op);
            }
            if (op.end > now || held()) {
              next = std::min(next, held() ? now + std::chrono::milliseconds(1) : op.end);
              break;
            }
            give_sms(op.sms);
          } else if (op.kind == Op::kCopy) {
            std::memcpy(op.dst, op.src, op.bytes);
          } else {
            op.event->completed = std::max(op.event->completed, op.event_record);
          }
          queue.pop_front();
          finished_any = true;
        }
      }
      if (finished_any) {
        done_.notify_all();
        continue;  // freed SMs may let another stream start
      }
      changed_.wait_until(lock, next);
    }
  }

  // Block dispatch: brings a kernel at the head of its stream up to `now`;
  // true when it has finished (its SMs given back).
  bool advance_blocks(Op& op, Clock::time_point now, Clock::time_point& next) {
    if (!op.ready) publish_waiting(now);  // it just reached the head of its stream
    if (op.held > 0) op.work_left -= static_cast<double>(op.held) * static_cast<double>((now - op.last).count());
    op.last = now;
    if (op.held > 0 && op.work_left <= 0 && !held()) {
      give_sms(op.held);
      op.held = 0;
      return true;
    }
    if (op.held < op.sms && first_in_line(op.key)) {
      const int got = take_up_to(op.sms - op.held);
      if (got > 0 && op.held == 0) start_kernel(op);
      op.held += got;
      if (op.held == op.sms) publish_waiting(now);  // the next in line may take what is left
    }
    if (op.held < op.sms && pool_ != nullptr) next = std::min(next, now + std::chrono::microseconds(50));
    if (op.held > 0) {
      const auto left = std::chrono::nanoseconds(
          static_cast<std::int64_t>(std::ceil(std::max(0.0, op.work_left) / static_cast<double>(op.held))));
      next = std::min(next, held() ? now + std::chrono::milliseconds(1) : now + left);
    }
    return false;
  }
  // Marks the kernels that reached the head of their streams as waiting
  // (their key: stream priority, then arrival) and publishes this process's
  // first one still wanting SMs, for the other processes to respect.
  void publish_waiting(Clock::time_point now) {
    std::int64_t first = 0;
    for (auto& [stream, queue] : queues_) {
      if (queue.empty() || queue.front().kind != Op::kKernel) continue;
      Op& op = queue.front();
      if (!op.ready) {
        op.ready = true;
        op.last = now;
        op.work_left = static_cast<double>(op.duration_ns) * op.sms;
        const auto arrival = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
        op.key = (static_cast<std::int64_t>(std::clamp(op.priority + 16, 0, 31)) << 52) |
                 (arrival & ((std::int64_t{1} << 52) - 1));
        op.key = std::max<std::int64_t>(op.key, 1);
      }
      if (op.held < op.sms && (first == 0 || op.key < first)) first = op.key;
    }
    own_first_ = first;
    if (holder_ != nullptr) holder_->waiting_key.store(first);
  }
  // Whether no kernel ahead of `key` (here or in another process) still
  // waits for SMs; a process that is gone waits for nothing (its entry and
  // SMs are reclaimed), or one killed while waiting would stop the rest.
  bool first_in_line(std::int64_t key) {
    if (own_first_ != 0 && own_first_ < key) return false;
    if (pool_ == nullptr) return true;
    for (SharedPool::Holder& h : pool_->holders) {
      if (&h == holder_) continue;
      const std::int64_t other = h.waiting_key.load();
      if (other != 0 && other < key && h.pid.load() > 0 && !reclaim_if_gone(*pool_, h)) return false;
    }
    return true;
  }
  // Up to n free SMs (block dispatch); how many it got.
  int take_up_to(int n) {
    if (pool_ == nullptr) {
      const int got = std::min(n, free_sms_);
      free_sms_ -= got;
      return got;
    }
    int free = pool_->free_sms.load();
    while (free > 0) {
      const int got = std::min(n, free);
      if (pool_->free_sms.compare_exchange_weak(free, free - got)) {
        if (holder_ != nullptr) holder_->sms.fetch_add(got);
        return got;
      }
    }
    return 0;
  }
  // What a kernel does when its first blocks start: its arithmetic and its log line.
  void start_kernel(Op& op) {
    op.started = true;
    for (std::uint64_t i = 0; i < op.elements; ++i) op.buffer[i] = mix(op.buffer[i] + op.seed + i);
    if (log_ != nullptr) {
      std::fprintf(log_, "%s %llu %u\n", op.function->name.c_str(), static_cast<unsigned long long>(op.grid),
                   op.block);
      std::fflush(log_);
    }
  }

  // A holder entry of the shared pool for this process (none if all 64 are
  // taken by live processes: its SMs are then not reclaimed if it dies).
  void book_holder() {
    const int self = static_cast<int>(::getpid());
    for (SharedPool::Holder& h : pool_->holders) {
      reclaim_if_gone(*pool_, h);
      int free = 0;
      if (h.pid.compare_exchange_strong(free, self)) {
        holder_ = &h;
        return;
      }
    }
  }
  bool take_sms(int n) {
    if (pool_ == nullptr) {
      if (n > free_sms_) return false;
      free_sms_ -= n;
      return true;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      int free = pool_->free_sms.load();
      while (free >= n) {
        if (pool_->free_sms.compare_exchange_weak(free, free - n)) {
          if (holder_ != nullptr) holder_->sms.fetch_add(n);
          return true;
        }
      }
      // Not enough free: SMs held by processes that are gone come back first.
      bool reclaimed = false;
      for (SharedPool::Holder& h : pool_->holders) reclaimed = reclaim_if_gone(*pool_, h) || reclaimed;
      if (!reclaimed) break;
    }
    return false;
  }
  void give_sms(int n) {
    if (pool_ == nullptr) {
      free_sms_ += n;
      return;
    }
    if (holder_ != nullptr) holder_->sms.fetch_sub(n);
    pool_->free_sms.fetch_add(n);
  }

  std::mutex mutex_;
  std::condition_variable changed_, done_;
  std::map<CUstream, std::deque<Op>> queues_;
  SharedPool* pool_ = nullptr;
  SharedPool::Holder* holder_ = nullptr;  // this process's entry in pool_
  int sm_count_ = 132;
  int free_sms_ = 132;
  std::FILE* log_ = nullptr;
  bool blocks_ = false;        ///< FAKE_CUDA_DISPATCH=blocks
  std::int64_t own_first_ = 0;  ///< key of this process's first kernel waiting for SMs (0: none)
  std::string hold_;  ///< FAKE_CUDA_HOLD: kernels finish only while no file is there
  bool held() const { return !hold_.empty() && ::access(hold_.c_str(), F_OK) == 0; }
};

Device& device() {
  static auto* d = new Device();  // never destroyed: its thread runs until exit
  return *d;
}

std::atomic<bool> initialised{false};
CUctx_st primary_context;
thread_local CUcontext current_context = nullptr;

CUresult launch(CUfunction f, std::uint64_t grid, unsigned block, CUstream stream, void** params) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (f == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Op op;
  op.kind = Op::kKernel;
  op.function = f;
  op.grid = grid;
  op.block = block;
  op.buffer = reinterpret_cast<std::uint64_t*>(*static_cast<CUdeviceptr*>(params[0]));
  op.elements = *static_cast<std::uint64_t*>(params[1]);
  op.seed = *static_cast<std::uint64_t*>(params[2]);
  op.duration_ns = *static_cast<std::uint64_t*>(params[3]);
  op.sms = device().kernel_sms(grid, block);
  if (stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD) op.priority = stream->priority;
  device().enqueue(stream, op);
  return CUDA_SUCCESS;
}

}  // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT CUresult cuInit(unsigned) {
  device();
  initialised = true;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDriverGetVersion(int* v) {
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<std::size_t>(len), "Fake GPU (test driver)");
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  *value = attribute == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? device().sm_count() : 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  *ctx = &primary_context;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  current_context = ctx;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = current_context;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSynchronize() {
  device().synchronize_all();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void*) {
  *module = new CUmod_st();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  auto& slot = module->functions[name];
  if (!slot) slot = std::make_unique<CUfunc_st>(CUfunc_st{name});
  *f = slot.get();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuFuncGetName(const char** name, CUfunction f) {
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  *p = reinterpret_cast<CUdeviceptr>(std::calloc(1, std::max<size_t>(bytes, 1)));
  return *p != 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  device().synchronize_all();
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  device().synchronize_all();
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  device().synchronize_all();
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream s) {
  Op op;
  op.kind = Op::kCopy;
  op.dst = reinterpret_cast<void*>(dst);
  op.src = src;
  op.bytes = bytes;
  device().enqueue(s, op);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
  Op op;
  op.kind = Op::kCopy;
  op.dst = dst;
  op.src = reinterpret_cast<const void*>(src);
  op.bytes = bytes;
  device().enqueue(s, op);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamCreateWithPriority(CUstream* s, unsigned, int priority) {
  *s = new CUstream_st{priority};
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamCreate(CUstream* s, unsigned flags) { return cuStreamCreateWithPriority(s, flags, 0); }
FAKE_EXPORT CUresult cuStreamGetPriority(CUstream s, int* priority) {
  *priority = s != nullptr ? s->priority : 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  device().synchronize(s);
  delete s;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  device().synchronize(s);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* status) {
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventCreate(CUevent* e, unsigned) {
  *e = new CUevent_st();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  device().event_wait(e);
  delete e;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
  Op op;
  op.kind = Op::kEvent;
  op.event = e;
  device().enqueue(s, op);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventQuery(CUevent e) { return device().event_done(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }
FAKE_EXPORT CUresult cuEventSynchronize(CUevent e) {
  device().event_wait(e);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned, CUstream s, void** params, void**) {
  return launch(f, std::uint64_t{gx} * gy * gz, bx * by * bz, s, params);
}
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void**) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, std::uint64_t{c->gridDimX} * c->gridDimY * c->gridDimZ, c->blockDimX * c->blockDimY * c->blockDimZ,
                c->hStream, params);
}
FAKE_EXPORT CUresult cuProfilerStart() { return CUDA_SUCCESS; }
FAKE_EXPORT CUresult cuProfilerStop() { return CUDA_SUCCESS; }
FAKE_EXPORT CUresult cuGetErrorString(CUresult r, const char** text) {
  *text = r == CUDA_SUCCESS ? "no error" : "fake driver error";
  return CUDA_SUCCESS;
}

namespace {

struct NamedEntry {
  const char* name;
  void* fn;
};

#define FAKE_ENTRY(fn) \
  NamedEntry { #fn, reinterpret_cast < void*>(&fn) }
const NamedEntry kEntries[] = {
    FAKE_ENTRY(cuInit),
    FAKE_ENTRY(cuDriverGetVersion),
    FAKE_ENTRY(cuDeviceGetCount),
    FAKE_ENTRY(cuDeviceGet),
    FAKE_ENTRY(cuDeviceGetName),
    FAKE_ENTRY(cuDeviceGetAttribute),
    FAKE_ENTRY(cuDevicePrimaryCtxRetain),
    FAKE_ENTRY(cuCtxSetCurrent),
    FAKE_ENTRY(cuCtxGetCurrent),
    FAKE_ENTRY(cuCtxSynchronize),
    FAKE_ENTRY(cuCtxGetStreamPriorityRange),
    FAKE_ENTRY(cuModuleLoadData),
    FAKE_ENTRY(cuModuleGetFunction),
    FAKE_ENTRY(cuFuncGetName),
    FAKE_ENTRY(cuStreamCreate),
    FAKE_ENTRY(cuStreamCreateWithPriority),
    FAKE_ENTRY(cuStreamGetPriority),
    FAKE_ENTRY(cuStreamSynchronize),
    FAKE_ENTRY(cuStreamIsCapturing),
    FAKE_ENTRY(cuEventCreate),
    FAKE_ENTRY(cuEventRecord),
    FAKE_ENTRY(cuEventQuery),
    FAKE_ENTRY(cuEventSynchronize),
    FAKE_ENTRY(cuLaunchKernel),
    FAKE_ENTRY(cuLaunchKernelEx),
    FAKE_ENTRY(cuProfilerStart),
    FAKE_ENTRY(cuProfilerStop),
    FAKE_ENTRY(cuGetErrorString),
    // Versioned names are asked for by their base name, as the runtime does.
    NamedEntry{"cuMemAlloc", reinterpret_cast<void*>(&cuMemAlloc_v2)},
    NamedEntry{"cuMemFree", reinterpret_cast<void*>(&cuMemFree_v2)},
    NamedEntry{"cuMemcpyHtoD", reinterpret_cast<void*>(&cuMemcpyHtoD_v2)},
    NamedEntry{"cuMemcpyDtoH", reinterpret_cast<void*>(&cuMemcpyDtoH_v2)},
    NamedEntry{"cuMemcpyHtoDAsync", reinterpret_cast<void*>(&cuMemcpyHtoDAsync_v2)},
    NamedEntry{"cuMemcpyDtoHAsync", reinterpret_cast<void*>(&cuMemcpyDtoHAsync_v2)},
    NamedEntry{"cuStreamDestroy", reinterpret_cast<void*>(&cuStreamDestroy_v2)},
    NamedEntry{"cuEventDestroy", reinterpret_cast<void*>(&cuEventDestroy_v2)},
};
#undef FAKE_ENTRY

CUresult lookup(const char* symbol, void** pfn);

}  // namespace

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult* status) {
  const CUresult r = lookup(symbol, pfn);
  if (status != nullptr)
    *status = r == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return r;
}
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int, cuuint64_t) { return lookup(symbol, pfn); }

namespace {
CUresult lookup(const char* symbol, void** pfn) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    *pfn = reinterpret_cast<void*>(&cuGetProcAddress_v2);
    return CUDA_SUCCESS;
  }
  for (const NamedEntry& e : kEntries) {
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      return CUDA_SUCCESS;
    }
  }
  *pfn = nullptr;
  return CUDA_ERROR_NOT_FOUND;
}
}  // namespace
