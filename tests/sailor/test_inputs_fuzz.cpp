// Mutated planner inputs (model, profile, cluster and job JSON) and plans:
// each loads and is priced, or fails with the toolkit's own error, one
// line: never a crash, an index past a table or a number that overflows
// (run under ASan/UBSan too).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/json.h"
#include "fuzz_util.h"
#include "sailor/planner_inputs.h"
#include "sailor/estimator.h"
#include "sailor/plan.h"
#include "test_util.h"

namespace fleet::sailor {
namespace {

using fleet::testing::fuzz;
using fleet::testing::fuzz_iterations;

const std::filesystem::path kInputs = std::filesystem::path(FLEET_SOURCE_DIR) / "examples" / "sailor" / "opt-350";
const std::filesystem::path kPlans = std::filesystem::path(FLEET_SOURCE_DIR) / "examples" / "sailor" / "plans";

// Fuzzes one of the four input files; the other three stay as shipped, and
// whatever loads is priced with a shipped plan.
void fuzz_input(const std::string& name, int iterations, std::uint64_t seed) {
  fleet::testing::TempDir dir;
  for (const char* f : {"model.json", "cluster.json", "job.json"}) std::filesystem::copy_file(kInputs / f, dir / f);
  // The profile of the plan's GPU type only: a seventh of the file, so each
  // mutation loads quickly (under the sanitizers too).
  nlohmann::json profile = nlohmann::json::parse(read_file(kInputs / "profile.json"));
  profile["gpus"] = nlohmann::json{{"GH-96", profile["gpus"]["GH-96"]}};
  std::ofstream(dir / "profile.json") << profile.dump(1);
  const std::string plan_text = read_file(kPlans / "opt350_gh200_pp2.json");
  const auto counts = fuzz({read_file(dir / name)}, iterations, seed, [&](const std::string& text) {
    std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << text;
    InputPaths paths;
    paths.inputs = dir.path();
    const PlannerInputs inputs = load_inputs(paths);
    const JsonDocument doc = parse_json(plan_text, "plan.json");
    const Plan plan = plan_from_json(doc.root(), inputs.job);
    validate_plan(plan, inputs.model, inputs.cluster);
    const Estimate e = estimate_plan(plan, inputs);
    if (e.fits) {
      EXPECT_TRUE(std::isfinite(e.iteration_s) && e.iteration_s > 0) << e.iteration_s;
    }
  });
  EXPECT_GT(counts.rejected, iterations / 5) << name;
}

TEST(InputFuzz, ModelJson) { fuzz_input("model.json", fuzz_iterations(400), 21); }
TEST(InputFuzz, ProfileJson) { fuzz_input("profile.json", fuzz_iterations(150), 22); }
TEST(InputFuzz, ClusterJson) { fuzz_input("cluster.json", fuzz_iterations(400), 23); }
TEST(InputFuzz, JobJson) { fuzz_input("job.json", fuzz_iterations(400), 24); }

TEST(InputFuzz, PlanJson) {
  fleet::testing::TempDir dir;
  InputPaths paths;
  paths.inputs = kInputs;
  const PlannerInputs inputs = load_inputs(paths);
  std::vector<std::string> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(kPlans)) seeds.push_back(read_file(entry.path()));
  const auto counts = fuzz(seeds, fuzz_iterations(3000), 25, [&](const std::string& text) {
    const JsonDocument doc = parse_json(text, "plan.json");
    const Plan plan = plan_from_json(doc.root(), inputs.job);
    validate_plan(plan, inputs.model, inputs.cluster);
    (void)estimate_plan(plan, inputs);
  });
  EXPECT_GT(counts.rejected, 500);
}

}  // namespace
}  // namespace fleet::sailor
