#pragma once

// Assertions shared by the GoogleTest suites (tests/cpp is on every suite's
// include path, see torchplug_add_test).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <initializer_list>
#include <string>

namespace torchplug::testing {

// `f` throws `Exception` whose message names every one of `parts`.
template <typename Exception = c10::Error, typename F>
::testing::AssertionResult throws_with(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Exception& e) {
    const std::string message = e.what_without_backtrace();
    for (const auto& part : parts) {
      if (message.find(part) == std::string::npos) {
        return ::testing::AssertionFailure() << "message lacks \"" << part << "\": " << message;
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "nothing was thrown";
}

// Same dtype, same shape, equal values.
inline ::testing::AssertionResult same(const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.scalar_type() != expected.scalar_type() || actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "got " << actual.scalar_type() << actual.sizes() << ", expected "
           << expected.scalar_type() << expected.sizes();
  }
  if (!torch::equal(actual, expected)) {
    return ::testing::AssertionFailure() << "\ngot:\n" << actual << "\nexpected:\n" << expected;
  }
  return ::testing::AssertionSuccess();
}

// A fresh leaf that requires grad, holding t's values.
inline at::Tensor leaf(const at::Tensor& t) {
  return t.detach().clone().requires_grad_(true);
}

}  // namespace torchplug::testing
