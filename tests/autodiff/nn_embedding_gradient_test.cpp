// embedding_lookup gradients (float64) against central differences through the shared
// checker.
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/autodiff/nn_functions.h"
#include "testing/gradient_check.h"

namespace lockstep {
namespace {

using testing::gradients_match;
using testing::random_f64;
using V = std::vector<Tensor>;

TEST(EmbeddingGradient, RepeatedIdsAccumulate) {
  Generator gen(8);
  Tensor table = random_f64(gen, {11, 5});
  for (DType id_dtype : {DType::int32, DType::int64}) {
    Tensor ids = Tensor::from_vector<int64_t>({3, 0, 10, 3, 7, 7, 7, 1, 0}, {3, 3}).to(id_dtype);
    EXPECT_TRUE(gradients_match([=](const V& in) { return embedding_lookup(in[0], ids); }, {table}))
        << dtype_name(id_dtype);
  }
}

}  // namespace
}  // namespace lockstep
