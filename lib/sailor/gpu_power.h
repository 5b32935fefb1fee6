// Power drawn by a GPU when idle and when busy: the energy model's inputs
// (docs/sailor-model.md, "Energy"). cluster.json may give them per GPU type;
// known types have built-in defaults.
#pragma once

#include <optional>
#include <string>

namespace fleet::sailor {

/// Watts of one GPU: with a CUDA context and nothing running, and running
/// kernels flat out (the board's power limit).
struct GpuPower {
  double idle_watts = 0;
  double busy_watts = 0;
  bool known() const { return busy_watts > 0; }
};

/// The built-in figures for a GPU type by its name in cluster.json
/// ("A100-40", "A100-80", "V100-16", "V100-32", "H100", "H200", "GH200" and
/// "GH-96"); nullopt for any other name.
std::optional<GpuPower> default_gpu_power(const std::string& gpu_type);

}  // namespace fleet::sailor
