#pragma once

// Input checks shared by every op. Each failure raises c10::Error (a Python
// RuntimeError) whose message names the op, the argument and what was expected:
//
//   torchplug::scatter_sum: argument 'index' must be an int64 tensor, got Float
//
// Use the macros, which pass the argument's name for you:
//
//   TORCHPLUG_CHECK_INPUT("torchplug::add", a);   // CUDA and contiguous

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <initializer_list>
#include <utility>

namespace torchplug::core {

// A tensor argument together with the name the user knows it by.
using NamedTensor = std::pair<const char*, const at::Tensor*>;

void check_cpu(const char* op, const char* arg, const at::Tensor& t);
void check_cuda(const char* op, const char* arg, const at::Tensor& t);
void check_contiguous(const char* op, const char* arg, const at::Tensor& t);
void check_defined(const char* op, const char* arg, const at::Tensor& t);

// All tensors on the first one's device.
void check_same_device(const char* op, std::initializer_list<NamedTensor> tensors);

void check_dtype(const char* op, const char* arg, const at::Tensor& t, at::ScalarType expected);
void check_dtype_in(const char* op, const char* arg, const at::Tensor& t,
                    c10::ArrayRef<at::ScalarType> allowed);
void check_same_dtype(const char* op, NamedTensor a, NamedTensor b);

// A tensor an op writes in place has no two elements in one memory location
// and shares none with the tensors it reads (results would depend on the
// order of the writes), as PyTorch's in-place ops require.
void check_no_overlap(const char* op, NamedTensor written, std::initializer_list<NamedTensor> read);

// Index tensors are int64, as in torch.gather / scatter_add_.
void check_index_dtype(const char* op, const char* arg, const at::Tensor& index);

// The smallest and largest value of an index, {0, -1} when it is empty. Reads
// the values: one pass, and one synchronisation when `index` is on a device.
struct IndexBounds {
  int64_t min;
  int64_t max;
};
IndexBounds index_bounds(const at::Tensor& index);

// Every value lies in [0, size); the IndexError names the offending extreme.
void check_index_range(const char* op, const char* arg, IndexBounds bounds, int64_t size);

// A 1-D offsets tensor (an indptr, a CSR's rowptr) starts at 0, never
// decreases and ends at `end` (`end_name` says what that is: "nnz =
// col.size(0)"); an IndexError naming op and arg otherwise. Reads the values:
// one synchronisation on a device.
void check_offsets(const char* op, const char* arg, const at::Tensor& offsets, int64_t end,
                   const char* end_name);

// Checked mode for CUDA kernels: validate index values (one synchronising pass
// over the index) before anything is written, and raise on a bad one. CPU
// kernels always validate. Off by default on CUDA, where out-of-range values
// are skipped instead. TORCHPLUG_CHECKS in the environment sets it at first
// use: 1/true/yes/on or 0/false/no/off, any case; another value is an error.
bool cuda_checks_enabled();
void set_cuda_checks(bool enabled);

// Whether an op on `device` validates index values before writing: always on
// CPU, on CUDA in checked mode.
bool validates_indices(const at::Device& device);

}  // namespace torchplug::core

#define TORCHPLUG_CHECK_CPU(op, x) ::torchplug::core::check_cpu(op, #x, x)
#define TORCHPLUG_CHECK_CUDA(op, x) ::torchplug::core::check_cuda(op, #x, x)
#define TORCHPLUG_CHECK_CONTIGUOUS(op, x) ::torchplug::core::check_contiguous(op, #x, x)
#define TORCHPLUG_CHECK_INPUT(op, x) \
  do {                               \
    TORCHPLUG_CHECK_CUDA(op, x);     \
    TORCHPLUG_CHECK_CONTIGUOUS(op, x); \
  } while (0)
#define TORCHPLUG_CHECK_INDEX(op, x) ::torchplug::core::check_index_dtype(op, #x, x)
#define TORCHPLUG_ARG(x) ::torchplug::core::NamedTensor(#x, &(x))
