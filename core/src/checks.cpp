#include "torchplug/core/checks.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/any.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

namespace torchplug::core {

void check_defined(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

void check_cpu(const char* op, const char* arg, const at::Tensor& t) {
  check_defined(op, arg, t);
  TORCH_CHECK(t.device().is_cpu(), op, ": argument '", arg,
              "' must be a CPU tensor, got a tensor on ", t.device());
}

void check_cuda(const char* op, const char* arg, const at::Tensor& t) {
  check_defined(op, arg, t);
  TORCH_CHECK(t.device().is_cuda(), op, ": argument '", arg,
              "' must be a CUDA tensor, got a tensor on ", t.device());
}

void check_contiguous(const char* op, const char* arg, const at::Tensor& t) {
  check_defined(op, arg, t);
  TORCH_CHECK(t.is_contiguous(), op, ": argument '", arg, "' must be contiguous, got strides ",
              t.strides(), " for shape ", t.sizes());
}

void check_same_device(const char* op, std::initializer_list<NamedTensor> tensors) {
  const NamedTensor* first = nullptr;
  for (const auto& named : tensors) {
    check_defined(op, named.first, *named.second);
    if (first == nullptr) {
      first = &named;
      continue;
    }
    TORCH_CHECK(named.second->device() == first->second->device(), op,
                ": expected all tensors on one device, but argument '", first->first, "' is on ",
                first->second->device(), " and argument '", named.first, "' is on ",
                named.second->device());
  }
}

void check_dtype(const char* op, const char* arg, const at::Tensor& t, at::ScalarType expected) {
  check_defined(op, arg, t);
  TORCH_CHECK(t.scalar_type() == expected, op, ": argument '", arg, "' must be a ", expected,
              " tensor, got ", t.scalar_type());
}

void check_dtype_in(const char* op, const char* arg, const at::Tensor& t,
                    c10::ArrayRef<at::ScalarType> allowed) {
  check_defined(op, arg, t);
  for (auto dtype : allowed) {
    if (t.scalar_type() == dtype) return;
  }
  std::string names;
  for (auto dtype : allowed) {
    names += names.empty() ? "" : ", ";
    names += c10::toString(dtype);
  }
  TORCH_CHECK(false, op, ": argument '", arg, "' has unsupported dtype ", t.scalar_type(),
              "; supported: ", names);
}

void check_same_dtype(const char* op, NamedTensor a, NamedTensor b) {
  TORCH_CHECK(a.second->scalar_type() == b.second->scalar_type(), op, ": arguments '", a.first,
              "' and '", b.first, "' must have the same dtype, got ", a.second->scalar_type(),
              " and ", b.second->scalar_type());
}

void check_no_overlap(const char* op, NamedTensor written, std::initializer_list<NamedTensor> read) {
  const at::Tensor& out = *written.second;
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, op, ": argument '",
              written.first, "' has elements that share memory (an expanded tensor?); it is "
              "written in place, so pass one without (e.g. .clone())");
  for (const auto& [name, tensor] : read) {
    const auto status = at::get_overlap_status(out, *tensor);
    TORCH_CHECK(status != at::MemOverlapStatus::Full && status != at::MemOverlapStatus::Partial,
                op, ": argument '", written.first, "' shares memory with argument '", name,
                "'; it is written in place, so pass a separate tensor (e.g. ", name, ".clone())");
  }
}

void check_index_dtype(const char* op, const char* arg, const at::Tensor& index) {
  check_defined(op, arg, index);
  TORCH_CHECK(index.scalar_type() == at::kLong, op, ": argument '", arg,
              "' must be an int64 tensor, got ", index.scalar_type());
}

IndexBounds index_bounds(const at::Tensor& index) {
  if (index.numel() == 0) return {0, -1};
  at::Tensor both = at::empty({2}, index.options());
  at::Tensor lo = both.select(0, 0), hi = both.select(0, 1);
  at::aminmax_out(lo, hi, index);
  both = both.cpu();
  return {both.const_data_ptr<int64_t>()[0], both.const_data_ptr<int64_t>()[1]};
}

void check_index_range(const char* op, const char* arg, IndexBounds bounds, int64_t size) {
  if (bounds.max < bounds.min) return;  // empty
  TORCH_CHECK_INDEX(bounds.min >= 0, op, ": argument '", arg, "' holds the negative value ",
                    bounds.min, "; expected values in [0, ", size, ")");
  TORCH_CHECK_INDEX(bounds.max < size, op, ": argument '", arg, "' holds the value ", bounds.max,
                    ", out of range for an output of size ", size, "; expected values in [0, ",
                    size, ")");
}

void check_offsets(const char* op, const char* arg, const at::Tensor& offsets, int64_t end,
                   const char* end_name) {
  const int64_t n = offsets.size(0);
  const auto facts = at::stack({offsets[0], at::lt(offsets.narrow(0, 1, n - 1), offsets.narrow(0, 0, n - 1))
                                                .any().to(at::kLong), offsets[n - 1]}).cpu();
  const int64_t* fact = facts.const_data_ptr<int64_t>();
  TORCH_CHECK_INDEX(fact[0] == 0, op, ": argument '", arg, "' must start at 0, got ", fact[0]);
  TORCH_CHECK_INDEX(fact[1] == 0, op, ": argument '", arg, "' must not decrease");
  TORCH_CHECK_INDEX(fact[2] == end, op, ": argument '", arg, "' must end at ", end_name, " (", end, "), got ",
                    fact[2]);
}

namespace {

// TORCHPLUG_CHECKS as a boolean: unset or empty is off; 1/true/yes/on and
// 0/false/no/off (any case, surrounding blanks ignored) turn checked mode on
// and off; anything else is an error naming the variable and its value.
bool checks_from_environment() {
  const char* raw = std::getenv("TORCHPLUG_CHECKS");
  if (raw == nullptr) return false;
  std::string value(raw);
  const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!value.empty() && blank(value.back())) value.pop_back();
  value.erase(value.begin(), std::find_if_not(value.begin(), value.end(), blank));
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (value.empty()) return false;
  for (const char* on : {"1", "true", "yes", "on"}) {
    if (value == on) return true;
  }
  for (const char* off : {"0", "false", "no", "off"}) {
    if (value == off) return false;
  }
  TORCH_CHECK_VALUE(false, "torchplug: environment variable TORCHPLUG_CHECKS='", raw,
                    "' is not a boolean; expected one of 1, 0, true, false, yes, no, on, off "
                    "(any case) or unset");
}

std::atomic<bool>& cuda_checks() {
  static std::atomic<bool> enabled(checks_from_environment());
  return enabled;
}

}  // namespace

bool cuda_checks_enabled() {
  return cuda_checks().load(std::memory_order_relaxed);
}

void set_cuda_checks(bool enabled) {
  cuda_checks().store(enabled, std::memory_order_relaxed);
}

bool validates_indices(const at::Device& device) {
  return device.is_cpu() || cuda_checks_enabled();
}

}  // namespace torchplug::core
