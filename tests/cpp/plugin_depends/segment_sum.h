#pragma once

#include <ATen/core/Tensor.h>

namespace segment_sum {

// out[i] = the sum of src's rows indptr[i] .. indptr[i + 1] (src 2-D, float64).
at::Tensor segment_sum(const at::Tensor& src, const at::Tensor& indptr);

}  // namespace segment_sum
