#pragma once

// Included before every source of a plugin that torchplug_add_plugin builds.
//
// Torch's registration macros register while their library is being opened,
// where an error (an op that another library defines, say) terminates the
// process. In a plugin they do not compile: its blocks are TORCHPLUG_LIBRARY
// and TORCHPLUG_LIBRARY_IMPL (torchplug/core/library.h), which
// torchplug.load_plugin registers all or none, raising an error on a clash.

#include <c10/macros/Macros.h>
#include <torch/library.h>

#undef TORCH_LIBRARY
#undef TORCH_LIBRARY_FRAGMENT
#undef TORCH_LIBRARY_IMPL

// The refusal, then the block's body as a function that is never called, so
// that the refusal is the only error.
#define TORCHPLUG_REFUSE_TORCH_MACRO(macro, instead, m)                                                   \
  static_assert(false, macro " registers outside torchplug.load_plugin's guard, where a clash aborts "   \
                             "the process: a torchplug plugin registers with " instead                   \
                             " (torchplug/core/library.h)");                                             \
  [[maybe_unused]] static void C10_CONCATENATE(torchplug_refused_block_, C10_UID)(torch::Library & m)

#define TORCH_LIBRARY(ns, m) TORCHPLUG_REFUSE_TORCH_MACRO("TORCH_LIBRARY", "TORCHPLUG_LIBRARY(ns, m)", m)
#define TORCH_LIBRARY_FRAGMENT(ns, m) \
  TORCHPLUG_REFUSE_TORCH_MACRO("TORCH_LIBRARY_FRAGMENT", "TORCHPLUG_LIBRARY(ns, m)", m)
#define TORCH_LIBRARY_IMPL(ns, k, m) \
  TORCHPLUG_REFUSE_TORCH_MACRO("TORCH_LIBRARY_IMPL", "TORCHPLUG_LIBRARY_IMPL(ns, key, m)", m)
