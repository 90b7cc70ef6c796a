#include "torchplug/core/autograd.h"

#include <ATen/FuncTorchTLS.h>
#include <c10/util/Exception.h>

namespace torchplug::core {

void check_autograd_support(const char* op, c10::ArrayRef<NamedTensor> inputs) {
  if (const auto& functorch = at::functorch::functorchTLSAccessor()) {
    functorch->checkSupportsCppAutogradFunction();
  }
  for (const auto& [name, tensor] : inputs) {
    // Level 0: the only level dual tensors use.
    TORCH_CHECK(!tensor->_fw_grad(/*level=*/0).defined(), op, ": argument '", name,
                "' carries a forward-mode tangent (a dual tensor); forward-mode AD is not supported");
  }
}

}  // namespace torchplug::core
