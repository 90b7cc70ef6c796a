#include "torchplug/core/library.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace torchplug::core {
namespace {

// The blocks of the library being loaded by torchplug.load_plugin, if one is.
struct GuardedLoad {
  bool active = false;
  std::vector<LibraryBlock*> blocks;
};

std::mutex& load_mutex() {
  static std::mutex mutex;
  return mutex;
}

GuardedLoad& guarded_load() {
  static GuardedLoad load;
  return load;
}

c10::OperatorName operator_name(const std::string& qualified) {
  const auto dot = qualified.find('.');
  return {qualified.substr(0, dot), dot == std::string::npos ? "" : qualified.substr(dot + 1)};
}

void submit(LibraryBlock* block) {
  std::lock_guard<std::mutex> lock(load_mutex());
  auto& load = guarded_load();
  if (load.active) {
    load.blocks.push_back(block);
    return;
  }
  block->run();
}

}  // namespace

Library::Library(torch::Library& library, std::string ns, std::string plugin)
    : library_(library), ns_(std::move(ns)), plugin_(std::move(plugin)) {}

Library& Library::define(const OpDef& def) {
  // A clear error before the dispatcher's own, which names no plugin.
  auto name = def.name();
  if (name.find("::") == std::string::npos) name = ns_ + "::" + name;
  if (const auto existing = c10::Dispatcher::singleton().findSchema(operator_name(name))) {
    TORCH_CHECK(false, "op '", name, "' (plugin '", plugin_, "') is already registered, as '",
                existing->schema(), "'; a plugin defines its ops in a namespace of its own");
  }
  library_.def(def.schema.c_str());
  Registry::instance().add(ns_, plugin_, def);
  return *this;
}

c10::OperatorHandle find_op_handle(const OpDef& def) {
  const auto name = def.name();
  TORCH_CHECK(name.find("::") != std::string::npos, "torchplug: find_op needs a schema that names its namespace, got '",
              def.schema, "'");
  const auto op = operator_name(name);
  return c10::Dispatcher::singleton().findSchemaOrThrow(op.name.c_str(), op.overload_name.c_str());
}

LibraryBlock::LibraryBlock(const char* ns, const char* plugin, DefineFn define, const char* file,
                           uint32_t line)
    : ns_(ns), plugin_(plugin ? plugin : ns), define_(define), file_(file), line_(line) {
  submit(this);
}

LibraryBlock::LibraryBlock(const char* ns, c10::DispatchKey key, ImplFn impl, const char* file,
                           uint32_t line)
    : ns_(ns), plugin_(ns), key_(key), impl_(impl), file_(file), line_(line) {
  submit(this);
}

void LibraryBlock::run() {
  library_ = std::make_unique<torch::Library>(
      defines() ? torch::Library::FRAGMENT : torch::Library::IMPL, ns_, key_, file_, line_);
  if (defines()) {
    Library library(*library_, ns_, plugin_);
    define_(library);
  } else {
    impl_(*library_);
  }
}

void LibraryBlock::undo() { library_.reset(); }

void begin_guarded_load() {
  std::lock_guard<std::mutex> lock(load_mutex());
  auto& load = guarded_load();
  TORCH_CHECK(!load.active, "torchplug.load_plugin: another plugin is being loaded");
  load.active = true;
  load.blocks.clear();
}

void abort_guarded_load() {
  std::lock_guard<std::mutex> lock(load_mutex());
  guarded_load() = GuardedLoad{};
}

void commit_guarded_load(const std::string& library) {
  std::vector<LibraryBlock*> blocks;
  {
    std::lock_guard<std::mutex> lock(load_mutex());
    blocks = std::move(guarded_load().blocks);
    guarded_load() = GuardedLoad{};
  }
  // Definitions first: a kernel block must not land on an op another library owns.
  std::stable_partition(blocks.begin(), blocks.end(), [](const LibraryBlock* b) { return b->defines(); });
  const auto registered = Registry::instance().size();
  std::vector<LibraryBlock*> done;
  try {
    for (auto* block : blocks) {
      done.push_back(block);
      block->run();
    }
  } catch (const c10::Error& e) {
    for (auto it = done.rbegin(); it != done.rend(); ++it) (*it)->undo();
    Registry::instance().truncate(registered);
    TORCH_CHECK(false, "torchplug.load_plugin: '", library, "' was not loaded: ", e.what_without_backtrace());
  }
}

}  // namespace torchplug::core
