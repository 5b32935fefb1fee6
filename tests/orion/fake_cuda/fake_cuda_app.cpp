// A CUDA driver-API program for tests and benchmarks of the interposer and
// `orion-run exec`. It runs "requests" of fake kernels (see fake_driver.cpp)
// and prints a checksum of its device buffer, so results under a scheduler
// can be compared with results alone.
//
// Built twice: linked against libcuda.so.1 (calls the driver's symbols
// directly), and with FAKE_APP_DLOPEN, where it loads libcuda.so.1 with
// dlopen and takes every entry point from cuGetProcAddress, as the CUDA
// 12/13 runtime (shared or statically linked) does.
#include <cuda.h>
#include <cudaProfiler.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_retain)(CUcontext*, CUdevice);
  CUresult (*ctx_set)(CUcontext);
  CUresult (*module_load)(CUmodule*, const void*);
  CUresult (*get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*mem_alloc)(CUdeviceptr*, size_t);
  CUresult (*htod)(CUdeviceptr, const void*, size_t);
  CUresult (*dtoh)(void*, CUdeviceptr, size_t);
  CUresult (*stream_create)(CUstream*, unsigned);
  CUresult (*stream_sync)(CUstream);
  CUresult (*ctx_sync)();
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,
                     void**);
  CUresult (*launch_ex)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*profiler_start)();
  CUresult (*profiler_stop)();
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fake_cuda_app: %s\n", what);
  std::exit(1);
}

#ifdef FAKE_APP_DLOPEN
template <class Fn>
void entry(CUresult (*proc)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*), const char* name,
           Fn& out) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (proc(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || p == nullptr) {
    fail((std::string("driver has no ") + name).c_str());
  }
  out = reinterpret_cast<Fn>(p);
}

Driver load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) fail("cannot load libcuda.so.1");
  auto proc = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
      dlsym(lib, "cuGetProcAddress_v2"));
  if (proc == nullptr) fail("libcuda.so.1 has no cuGetProcAddress_v2");
  Driver d{};
  entry(proc, "cuInit", d.init);
  entry(proc, "cuDeviceGet", d.device_get);
  entry(proc, "cuDevicePrimaryCtxRetain", d.primary_retain);
  entry(proc, "cuCtxSetCurrent", d.ctx_set);
  entry(proc, "cuModuleLoadData", d.module_load);
  entry(proc, "cuModuleGetFunction", d.get_function);
  entry(proc, "cuMemAlloc", d.mem_alloc);
  entry(proc, "cuMemcpyHtoD", d.htod);
  entry(proc, "cuMemcpyDtoH", d.dtoh);
  entry(proc, "cuStreamCreate", d.stream_create);
  entry(proc, "cuStreamSynchronize", d.stream_sync);
  entry(proc, "cuCtxSynchronize", d.ctx_sync);
  entry(proc, "cuLaunchKernel", d.launch);
  entry(proc, "cuLaunchKernelEx", d.launch_ex);
  entry(proc, "cuProfilerStart", d.profiler_start);
  entry(proc, "cuProfilerStop", d.profiler_stop);
  return d;
}
#else
Driver load_driver() {
  return Driver{cuInit,          cuDeviceGet,         cuDevicePrimaryCtxRetain,
                cuCtxSetCurrent, cuModuleLoadData,    cuModuleGetFunction,
                cuMemAlloc,      cuMemcpyHtoD,        cuMemcpyDtoH,
                cuStreamCreate,  cuStreamSynchronize, cuCtxSynchronize,
                cuLaunchKernel,  cuLaunchKernelEx,    cuProfilerStart,
                cuProfilerStop};
}
#endif

struct Options {
  long requests = 5;  // 0: until SIGTERM
  int kernels = 4;    // per request
  int distinct = 2;   // distinct kernel names
  std::uint64_t duration_us = 1000;
  unsigned grid = 64, block = 256;
  std::string name = "kernel";
  bool markers = false;
  bool launch_ex = false;
  int streams = 1;
  std::uint64_t elements = 1024;
  std::uint64_t think_us = 0;
  std::string ready_file, wait_file;
  long bench = 0;  // >0: launch-latency benchmark with this many launches
  bool no_cuda = false;
  bool die_on_term = false;  // SIGTERM ends the process at once, mid-request (as most programs)
};

volatile sig_atomic_t stop_requested = 0;

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail(what);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--requests")
      o.requests = std::stol(value());
    else if (a == "--kernels")
      o.kernels = std::stoi(value());
    else if (a == "--distinct")
      o.distinct = std::max(1, std::stoi(value()));
    else if (a == "--duration-us")
      o.duration_us = std::stoull(value());
    else if (a == "--grid")
      o.grid = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--block")
      o.block = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--name")
      o.name = value();
    else if (a == "--markers")
      o.markers = true;
    else if (a == "--launch-ex")
      o.launch_ex = true;
    else if (a == "--streams")
      o.streams = std::max(1, std::stoi(value()));
    else if (a == "--elements")
      o.elements = std::stoull(value());
    else if (a == "--think-us")
      o.think_us = std::stoull(value());
    else if (a == "--ready-file")
      o.ready_file = value();
    else if (a == "--wait-file")
      o.wait_file = value();
    else if (a == "--bench")
      o.bench = std::stol(value());
    else if (a == "--no-cuda")
      o.no_cuda = true;
    else if (a == "--die-on-term")
      o.die_on_term = true;
    else
      fail(("unknown option " + a).c_str());
  }
  return o;
}

// The app's device state: its context, module functions, streams and buffer.
class App {
 public:
  explicit App(const Options& o) : o_(o), d_(load_driver()) {
    check(d_.init(0), "cuInit");
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    check(d_.device_get(&dev, 0), "cuDeviceGet");
    check(d_.primary_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(d_.ctx_set(ctx), "cuCtxSetCurrent");
    CUmodule module = nullptr;
    check(d_.module_load(&module, "fake module"), "cuModuleLoadData");
    functions_.resize(static_cast<std::size_t>(o.distinct));
    for (int k = 0; k < o.distinct; ++k) {
      check(
          d_.get_function(&functions_[static_cast<std::size_t>(k)], module, (o.name + "_" + std::to_string(k)).c_str()),
          "cuModuleGetFunction");
    }
    streams_.resize(static_cast<std::size_t>(o.streams));
    for (CUstream& s : streams_) check(d_.stream_create(&s, 0), "cuStreamCreate");
    check(d_.mem_alloc(&buffer_, bytes()), "cuMemAlloc");
    host_.resize(o.elements);
    for (std::size_t i = 0; i < host_.size(); ++i) host_[i] = i * 2654435761u;
    check(d_.htod(buffer_, host_.data(), bytes()), "cuMemcpyHtoD");
    duration_ns_ = o.duration_us * 1000;
    elements_ = o.elements;
  }

  // Launch latency: wall time of each launch call, no work on the device.
  void bench() {
    duration_ns_ = 0;
    elements_ = 0;
    std::vector<double> ns;
    ns.reserve(static_cast<std::size_t>(o_.bench));
    for (long i = 0; i < o_.bench; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      launch(0);
      ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
      if (i % 256 == 255) check(d_.ctx_sync(), "cuCtxSynchronize");
    }
    check(d_.ctx_sync(), "cuCtxSynchronize");
    std::sort(ns.begin(), ns.end());
    std::printf("launches %ld median_ns %.0f p99_ns %.0f\n", o_.bench, ns[ns.size() / 2], ns[ns.size() * 99 / 100]);
  }

  // Requests of --kernels launches each (between profiler markers with
  // --markers) until --requests or SIGTERM; then the buffer's checksum.
  void serve() {
    if (!o_.wait_file.empty()) {
      for (int i = 0; i < 3000 && access(o_.wait_file.c_str(), F_OK) != 0; ++i) usleep(1000);
    }
    long done = 0;
    for (long r = 0; (o_.requests == 0 || r < o_.requests) && !stop_requested; ++r) {
      if (o_.markers) check(d_.profiler_start(), "cuProfilerStart");
      for (int k = 0; k < o_.kernels; ++k) {
        seed_ = static_cast<std::uint64_t>(r) * 1000 + static_cast<std::uint64_t>(k);
        launch(k);
        if (r == 0 && k == 0 && !o_.ready_file.empty()) std::ofstream(o_.ready_file) << getpid() << "\n";
      }
      check(d_.ctx_sync(), "cuCtxSynchronize");
      if (o_.markers) check(d_.profiler_stop(), "cuProfilerStop");
      ++done;
      if (o_.think_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(o_.think_us));
    }
    check(d_.dtoh(host_.data(), buffer_, bytes()), "cuMemcpyDtoH");
    std::uint64_t sum = 1469598103934665603ull;
    for (std::uint64_t v : host_) sum = (sum ^ v) * 1099511628211ull;
    std::printf("requests %ld checksum %016llx\n", done, static_cast<unsigned long long>(sum));
  }

 private:
  std::size_t bytes() const { return o_.elements * sizeof(std::uint64_t); }

  void launch(int k) {
    void* params[] = {&buffer_, &elements_, &seed_, &duration_ns_};
    CUfunction f = functions_[static_cast<std::size_t>(k % o_.distinct)];
    CUstream s = streams_[static_cast<std::size_t>(k % o_.streams)];
    if (o_.launch_ex) {
      CUlaunchConfig c{};
      c.gridDimX = o_.grid;
      c.gridDimY = c.gridDimZ = 1;
      c.blockDimX = o_.block;
      c.blockDimY = c.blockDimZ = 1;
      c.hStream = s;
      check(d_.launch_ex(&c, f, params, nullptr), "cuLaunchKernelEx");
    } else {
      check(d_.launch(f, o_.grid, 1, 1, o_.block, 1, 1, 0, s, params, nullptr), "cuLaunchKernel");
    }
  }

  const Options& o_;
  Driver d_;
  std::vector<CUfunction> functions_;
  std::vector<CUstream> streams_;
  CUdeviceptr buffer_ = 0;
  std::vector<std::uint64_t> host_;
  std::uint64_t seed_ = 0, duration_ns_ = 0, elements_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.no_cuda) {
    std::printf("no cuda used\n");
    return 0;
  }
  if (!o.die_on_term) signal(SIGTERM, [](int) { stop_requested = 1; });
  App app(o);
  if (o.bench > 0)
    app.bench();
  else
    app.serve();
  return 0;
}
