// The simulator's contention constants, and the JSON file that sets them
// (docs/formats.md, "Orion contention model JSON"): the defaults reproduce
// Orion's V100 kernel pairs; a file calibrated on another GPU's pairs
// (scripts/orion_contention_fit.py) replaces them.
#pragma once

#include <filesystem>

namespace fleet::orion {

/// Contention model constants (calibrated against Orion's kernel-pair measurements).
struct ContentionModel {
  // Fraction of the device's compute / memory bandwidth a kernel uses at full
  // speed on all SMs, indexed by class: unknown, memory, compute.
  double compute_use[3] = {0.6, 0.2, 1.0};
  double memory_use[3] = {0.6, 0.93, 0.3};
  double same_class_penalty = 0.015;  ///< slowdown per other running kernel of the same known class
  /// Share of each SM resource one SM unit holds when the profile has no
  /// launch data, by class (unknown, memory, compute).
  double default_unit_share[3] = {1.0, 0.5, 0.5};
  /// A kernel of more waves than this is simulated in this many (each unit
  /// then stands for several consecutive blocks on its SM): bounds the events
  /// per kernel.
  int max_waves = 32;
};

/// Reads a contention model file: every constant it names replaces the
/// default, the others keep theirs. InputError naming the field for an
/// unknown key, a value out of range or a malformed file.
ContentionModel load_contention_model(const std::filesystem::path& path);

}  // namespace fleet::orion
