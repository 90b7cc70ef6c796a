#pragma once

// How a plugin registers its ops, in place of TORCH_LIBRARY, TORCH_LIBRARY_FRAGMENT
// and TORCH_LIBRARY_IMPL (which torchplug_add_plugin refuses, plugin_prelude.h):
//
//   const torchplug::core::OpDef kScaleAdd{"myplug::scale_add(Tensor a, Tensor b) -> Tensor",
//                                          {at::kFloat, at::kDouble}, "a + 2 b"};
//   TORCHPLUG_LIBRARY(myplug, m) { m.define(kScaleAdd); }
//   TORCHPLUG_LIBRARY_IMPL(myplug, CPU, m) { m.impl("scale_add", &scale_add_cpu); }
//
// Define an OpDef above the block that uses it, in the same file (or inline in
// a header): a block may run while its library is being initialised.
//
// Blocks register when their library is loaded, as torch's do, but through
// one place: while torchplug.load_plugin loads a library, its blocks are held,
// then registered together, definitions first. When one fails (an op that is
// already registered, say) every registration of that load is undone and the
// error reaches Python as an exception; a throwing static initialiser would
// terminate the process instead. Libraries linked by a C++ program register
// at once.

#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/macros/Macros.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace torchplug::core {

// The `m` of a TORCHPLUG_LIBRARY or TORCHPLUG_LIBRARY_IMPL block: torch's
// Library, the registry, and a guard for other libraries' kernels.
class Library {
 public:
  Library(torch::Library& library, std::string ns, std::string plugin, std::optional<c10::DispatchKey> key);

  // Gives the schema to the dispatcher and the OpDef to the registry.
  Library& define(const OpDef& def);

  // Registers a kernel; refuses one that would replace a kernel already
  // registered for that op and dispatch key (torch would only warn).
  template <typename Func>
  Library& impl(const char* name, Func&& f) {
    check_unclaimed(name);
    library_.impl(name, std::forward<Func>(f));
    return *this;
  }
  // The kernel of the op `def` declares.
  template <typename Func>
  Library& impl(const OpDef& def, Func&& f) {
    const auto& name = def.name();
    const auto sep = name.find("::");
    return impl(sep == std::string::npos ? name.c_str() : name.c_str() + sep + 2, std::forward<Func>(f));
  }

  // For what the registry does not describe (classes, fallbacks, tags).
  torch::Library& torch_library() { return library_; }

 private:
  void check_unclaimed(const char* name) const;

  torch::Library& library_;
  std::string ns_;
  std::string plugin_;
  std::optional<c10::DispatchKey> key_;
};

// One TORCHPLUG_LIBRARY or TORCHPLUG_LIBRARY_IMPL block: a static object of
// the plugin's library, which is never unloaded.
class LibraryBlock {
 public:
  using InitFn = void (*)(Library&);

  // `key`: none for a block of definitions, the dispatch key of a block of kernels.
  LibraryBlock(const char* ns, const char* plugin, std::optional<c10::DispatchKey> key, InitFn init,
               const char* file, uint32_t line);

  bool defines() const { return !key_.has_value(); }
  void run();   // registers the block's ops or kernels
  void undo();  // takes them back out of the dispatcher

 private:
  const char* ns_;
  const char* plugin_;
  std::optional<c10::DispatchKey> key_;
  InitFn init_;
  const char* file_;
  uint32_t line_;
  std::unique_ptr<torch::Library> library_;
};

// The op as a typed dispatcher handle, for a plugin's C++ API; keep it in a
// function-local static:
//   static const auto op = core::find_op<at::Tensor(const at::Tensor&, double)>(kScale);
//   return op.call(x, factor);
// `def`'s schema names its namespace ("myplug::scale(...)").
c10::OperatorHandle find_op_handle(const OpDef& def);
template <typename Signature>
c10::TypedOperatorHandle<Signature> find_op(const OpDef& def) {
  return find_op_handle(def).typed<Signature>();
}
// Another plugin's op, by its qualified name ("torchplug::scatter_sum"): for a
// plugin that calls it through the dispatcher (and names that plugin in DEPENDS).
c10::OperatorHandle find_op_handle(const std::string& qualified_name);
template <typename Signature>
c10::TypedOperatorHandle<Signature> find_op(const std::string& qualified_name) {
  return find_op_handle(qualified_name).typed<Signature>();
}

// A guarded load (torchplug.load_plugin) of the library at `path`: its blocks,
// constructed while the library is opened, are held; commit registers them all
// or, on the first error, undoes every one and throws c10::Error saying what
// clashed. Blocks of other libraries (a dependency opened with it) register at
// once. abort drops the held blocks. One guarded load at a time.
void begin_guarded_load(const std::string& path);
void commit_guarded_load();
void abort_guarded_load();

}  // namespace torchplug::core

// The plugin's name in the registry: the CMake target's, from
// torchplug_add_plugin; otherwise the namespace.
#ifdef TORCHPLUG_PLUGIN_NAME
#define TORCHPLUG_PLUGIN_NAME_OR_NULL TORCHPLUG_PLUGIN_NAME
#else
#define TORCHPLUG_PLUGIN_NAME_OR_NULL nullptr
#endif

#define TORCHPLUG_LIBRARY(ns, m) _TORCHPLUG_LIBRARY(ns, m, C10_UID)
#define _TORCHPLUG_LIBRARY(ns, m, uid)                                                         \
  static void C10_CONCATENATE(torchplug_library_##ns##_, uid)(::torchplug::core::Library&);     \
  static ::torchplug::core::LibraryBlock C10_CONCATENATE(torchplug_library_block_##ns##_, uid)( \
      C10_STRINGIZE(ns), TORCHPLUG_PLUGIN_NAME_OR_NULL, std::nullopt,                           \
      &C10_CONCATENATE(torchplug_library_##ns##_, uid), __FILE__, __LINE__);                   \
  static void C10_CONCATENATE(torchplug_library_##ns##_, uid)(::torchplug::core::Library & m)

#define TORCHPLUG_LIBRARY_IMPL(ns, k, m) _TORCHPLUG_LIBRARY_IMPL(ns, k, m, C10_UID)
#define _TORCHPLUG_LIBRARY_IMPL(ns, k, m, uid)                                                         \
  static void C10_CONCATENATE(torchplug_library_impl_##ns##_##k##_, uid)(::torchplug::core::Library&); \
  static ::torchplug::core::LibraryBlock C10_CONCATENATE(torchplug_library_impl_block_##ns##_##k##_,   \
                                                         uid)(                                         \
      C10_STRINGIZE(ns), TORCHPLUG_PLUGIN_NAME_OR_NULL, c10::DispatchKey::k,                           \
      &C10_CONCATENATE(torchplug_library_impl_##ns##_##k##_, uid), __FILE__, __LINE__);                \
  static void C10_CONCATENATE(torchplug_library_impl_##ns##_##k##_, uid)(::torchplug::core::Library & m)
