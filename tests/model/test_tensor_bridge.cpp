#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/error.h"
#include "common/safetensors.h"
#include "model/torch/tensor_bridge.h"
#include "test_util.h"

namespace fleet::model {
namespace {

TEST(TensorBridge, TorchTensorsSurviveASafetensorsRoundTrip) {
  testing::TempDir dir;
  torch::manual_seed(1);
  const std::vector<torch::Tensor> tensors = {
      torch::randn({3, 4}),
      torch::randn({5}).to(torch::kFloat16),
      torch::randn({2, 2, 2}).to(torch::kBFloat16),
      torch::randn({2}).to(torch::kFloat64),
      torch::arange(6, torch::kInt64).reshape({2, 3}),
      torch::tensor({true, false, true}),
      torch::randn({4, 6}).t(),  // non-contiguous
  };
  SafetensorsWriter writer;
  for (std::size_t i = 0; i < tensors.size(); ++i) add_to_writer(writer, "t" + std::to_string(i), tensors[i]);
  writer.write(dir / "m.safetensors");

  SafetensorsFile file(dir / "m.safetensors");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor back = to_torch(file.view("t" + std::to_string(i)));
    EXPECT_EQ(back.scalar_type(), tensors[i].scalar_type()) << i;
    EXPECT_EQ(back.sizes(), tensors[i].sizes()) << i;
    EXPECT_TRUE(torch::equal(back, tensors[i])) << i;
  }
}

TEST(TensorBridge, TypeMapping) {
  EXPECT_EQ(torch_scalar_type(DType::kBF16), torch::kBFloat16);
  EXPECT_EQ(dtype_of(torch::kHalf), DType::kF16);
  EXPECT_THROW(torch_scalar_type(DType::kU32), InputError);
  EXPECT_THROW(dtype_of(torch::kComplexFloat), InputError);
}

}  // namespace
}  // namespace fleet::model
