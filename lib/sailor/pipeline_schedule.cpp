#include "sailor/pipeline_schedule.h"

#include <algorithm>

namespace fleet::sailor {

std::vector<PipelineOp> one_f_one_b(int stage, int stages, int micro_batches) {
  using K = PipelineOp::Kind;
  const int warmup = std::clamp(stages - stage - 1, 0, micro_batches);
  std::vector<PipelineOp> ops;
  ops.reserve(static_cast<std::size_t>(2 * micro_batches));
  for (int m = 0; m < warmup; ++m) ops.push_back({K::kForward, m});
  for (int m = 0; m < micro_batches - warmup; ++m) {
    ops.push_back({K::kForward, warmup + m});
    ops.push_back({K::kBackward, m});
  }
  for (int m = micro_batches - warmup; m < micro_batches; ++m) ops.push_back({K::kBackward, m});
  return ops;
}

}  // namespace fleet::sailor
