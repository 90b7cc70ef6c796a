#include "torchplug/core/library.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace torchplug::core {
namespace {

// The library torchplug.load_plugin is opening, if any, and its blocks so far.
struct GuardedLoad {
  std::optional<std::string> path;  // canonical
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

std::string canonical(const char* path) {
  std::unique_ptr<char, decltype(&free)> resolved(realpath(path, nullptr), &free);
  return resolved ? resolved.get() : path;
}

// The file of the library that holds `object`.
std::string library_of(const void* object) {
  Dl_info info{};
  return dladdr(object, &info) && info.dli_fname ? canonical(info.dli_fname) : "";
}

void submit(LibraryBlock* block) {
  std::lock_guard<std::mutex> lock(load_mutex());
  auto& load = guarded_load();
  if (load.path && library_of(block) == *load.path) {
    load.blocks.push_back(block);
    return;
  }
  block->run();
}

}  // namespace

Library::Library(torch::Library& library, std::string ns, std::string plugin,
                 std::optional<c10::DispatchKey> key)
    : library_(library), ns_(std::move(ns)), plugin_(std::move(plugin)), key_(key) {}

Library& Library::define(const OpDef& def) {
  // A clear error before the dispatcher's own, which names no plugin.
  auto name = def.name();
  if (name.find("::") == std::string::npos) name = ns_ + "::" + name;
  if (const auto existing = c10::Dispatcher::singleton().findSchema(parse_operator_name(name))) {
    TORCH_CHECK(false, "op '", name, "' (plugin '", plugin_, "') is already registered, as '",
                existing->schema(), "'; a plugin defines its ops in a namespace of its own");
  }
  library_.def(def.schema.c_str());
  Registry::instance().add(ns_, plugin_, def);
  return *this;
}

void Library::check_unclaimed(const char* name) const {
  if (!key_) return;
  const auto op = c10::Dispatcher::singleton().findOp(parse_operator_name(ns_ + "::" + name));
  TORCH_CHECK(!op || !op->hasKernelForDispatchKey(*key_), "the ", *key_, " kernel of '", ns_, "::", name,
              "' (plugin '", plugin_, "') would replace the one already registered");
}

c10::OperatorHandle find_op_handle(const OpDef& def) {
  TORCH_CHECK(def.name().find("::") != std::string::npos,
              "torchplug: find_op needs a schema that names its namespace, got '", def.schema, "'");
  return find_op_handle(def.name());
}

c10::OperatorHandle find_op_handle(const std::string& qualified_name) {
  const auto op = parse_operator_name(qualified_name);
  return c10::Dispatcher::singleton().findSchemaOrThrow(op.name.c_str(), op.overload_name.c_str());
}

LibraryBlock::LibraryBlock(const char* ns, const char* plugin, std::optional<c10::DispatchKey> key,
                           InitFn init, const char* file, uint32_t line)
    : ns_(ns), plugin_(plugin ? plugin : ns), key_(key), init_(init), file_(file), line_(line) {
  submit(this);
}

void LibraryBlock::run() {
  library_ = std::make_unique<torch::Library>(
      defines() ? torch::Library::FRAGMENT : torch::Library::IMPL, ns_, key_, file_, line_);
  Library library(*library_, ns_, plugin_, key_);
  init_(library);
}

void LibraryBlock::undo() { library_.reset(); }

void begin_guarded_load(const std::string& path) {
  std::lock_guard<std::mutex> lock(load_mutex());
  auto& load = guarded_load();
  TORCH_CHECK(!load.path, "torchplug.load_plugin: another plugin is being loaded");
  load = GuardedLoad{canonical(path.c_str()), {}};
}

void abort_guarded_load() {
  std::lock_guard<std::mutex> lock(load_mutex());
  guarded_load() = GuardedLoad{};
}

void commit_guarded_load() {
  GuardedLoad load;
  {
    std::lock_guard<std::mutex> lock(load_mutex());
    std::swap(load, guarded_load());
  }
  TORCH_CHECK(load.path, "torchplug.load_plugin: no plugin is being loaded");
  // Definitions first: a kernel block must not land on an op another library owns.
  std::stable_partition(load.blocks.begin(), load.blocks.end(), [](const LibraryBlock* b) { return b->defines(); });
  const auto registered = Registry::instance().size();
  std::vector<LibraryBlock*> done;
  const auto undo = [&] {
    for (auto it = done.rbegin(); it != done.rend(); ++it) (*it)->undo();
    Registry::instance().truncate(registered);
  };
  try {
    for (auto* block : load.blocks) {
      done.push_back(block);
      block->run();
    }
  } catch (const c10::Error& e) {
    undo();
    TORCH_CHECK(false, "torchplug.load_plugin: '", *load.path, "' was not loaded: ", e.what_without_backtrace());
  } catch (const std::exception& e) {  // a malformed schema, say
    undo();
    TORCH_CHECK(false, "torchplug.load_plugin: '", *load.path, "' was not loaded: ", e.what());
  }
}

}  // namespace torchplug::core
