// Small workloads built in memory for policy and simulator tests.
#pragma once

#include <string>
#include <vector>

#include "orion/workload.h"

namespace fleet::orion::testing {

/// A kernel of `us` microseconds needing `sms` SMs.
inline SimKernel kernel(double us, int sms, KernelClass cls, int device_sms = 80) {
  SimKernel k;
  k.duration_us = us;
  k.sm_usage = sms;
  k.sm_need = std::max(1, std::min(sms, device_sms));
  k.cls = cls;
  return k;
}

/// A client running `requests` requests of `kernels` (closed loop unless a rate is given).
inline ClientSpec client(const std::string& name, std::vector<SimKernel> kernels, bool high, bool training,
                         std::int64_t requests, double rate = 0) {
  ClientSpec c;
  c.name = name;
  c.kernels = std::move(kernels);
  c.high_priority = high;
  c.training = training;
  c.requests = requests;
  if (rate > 0) {
    c.arrivals.kind = ArrivalKind::kPoisson;
    c.arrivals.rate_per_s = rate;
  }
  return c;
}

/// A V100 workload of `clients` with no launch overhead.
inline Workload workload(std::vector<ClientSpec> clients, std::uint64_t seed = 1) {
  Workload w;
  w.device = device_by_name("v100");
  w.clients = std::move(clients);
  for (std::size_t i = 0; i < w.clients.size(); ++i) w.clients[i].arrival_stream = i;
  w.seed = seed;
  w.launch_overhead_us = 0;
  return w;
}

}  // namespace fleet::orion::testing
