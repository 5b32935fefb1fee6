// A tiny, hand-computable planning problem: 4 layers, two GPU types, three
// zones in two regions, constant-bandwidth links.
#pragma once

#include "sailor/estimator.h"

namespace fleet::sailor::testing {

inline BandwidthFit constant_gbps(double gbps) { return {0, 0, gbps, 1e15}; }

inline PlannerInputs tiny_inputs() {
  PlannerInputs in;
  // Hand-computable: no per-micro-batch overhead, round memory constants.
  in.calibration = Calibration{};
  in.calibration.activation_bytes_per_float = 4.32;
  in.calibration.runtime_overhead_bytes = 4.46e9;
  in.model.name = "tiny";
  for (int l = 0; l < 4; ++l) {
    in.model.layers.push_back({{{1, 1e6}, {2, 0.5e6}}, {{1, 1000}, {2, 1000}}, {{1, 2000}, {2, 1000}}});
  }
  in.profiles.model = "tiny";
  for (int mbs : {1, 2}) {
    for (int tp : {1, 2}) {
      in.profiles.gpus["fast"][{mbs, tp}] = std::vector<LayerTimes>(4, LayerTimes{0.01, 0.02, 0.001});
      in.profiles.gpus["slow"][{mbs, tp}] = std::vector<LayerTimes>(4, LayerTimes{0.02, 0.04, 0.002});
    }
  }
  in.cluster.gpu_types["fast"] = {4, 80e9, 3.6, {}};
  in.cluster.gpu_types["slow"] = {4, 16e9, 1.8, {}};
  in.cluster.zone_region = {{"z1a", "r1"}, {"z1b", "r1"}, {"z2a", "r2"}};
  for (const char* gpu : {"fast", "slow"}) {
    for (const char* zone : {"z1a", "z1b", "z2a"}) in.cluster.quotas[gpu][zone] = 16;
    in.cluster.intra_node[gpu] = constant_gbps(100);
  }
  for (const char* a : {"fast", "slow"}) {
    for (const char* b : {"fast", "slow"}) {
      in.cluster.inter_node[{LinkClass::kSameZone, a, b}] = constant_gbps(10);
      in.cluster.inter_node[{LinkClass::kCrossZone, a, b}] = constant_gbps(5);
      in.cluster.inter_node[{LinkClass::kCrossRegion, a, b}] = constant_gbps(1);
    }
  }
  in.cluster.egress_per_gb = {
      {LinkClass::kSameZone, 0.0}, {LinkClass::kCrossZone, 0.01}, {LinkClass::kCrossRegion, 0.02}};
  in.job = {"tiny", 16, 128, "adam", "mixed"};
  return in;
}

/// Stages of `layers_per_stage` layers, each stage's replicas given as (gpu, zone) lists.
inline Plan make_plan(int mbs, int global_batch, const std::vector<int>& layers_per_stage,
                      const std::vector<std::vector<std::pair<std::string, std::string>>>& replicas, int tp = 1) {
  Plan p;
  p.mbs = mbs;
  p.global_batch = global_batch;
  int first = 0;
  for (std::size_t i = 0; i < layers_per_stage.size(); ++i) {
    Stage s;
    s.first_layer = first;
    s.last_layer = first + layers_per_stage[i];
    first = s.last_layer;
    s.tp = tp;
    for (const auto& [gpu, zone] : replicas[i]) s.replicas.push_back({gpu, zone, -1});
    p.stages.push_back(s);
  }
  return p;
}

}  // namespace fleet::sailor::testing
