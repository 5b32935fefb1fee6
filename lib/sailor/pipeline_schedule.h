// The 1F1B pipeline schedule (PipeDream-Flush, as Megatron-LM runs it):
// stage i of P first runs P - i - 1 warm-up forwards, then alternates one
// forward and one backward, then drains the remaining backwards. At most
// P - i micro-batches' activations are alive on stage i. The simulator and the runtime both follow it.
#pragma once

#include <vector>

namespace fleet::sailor {

struct PipelineOp {
  enum class Kind { kForward, kBackward };
  Kind kind;
  int micro;
  bool operator==(const PipelineOp&) const = default;
};

/// The order in which stage `stage` of `stages` runs `micro_batches` micro-batches.
std::vector<PipelineOp> one_f_one_b(int stage, int stages, int micro_batches);

}  // namespace fleet::sailor
