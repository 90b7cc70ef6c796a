// Framework test: the registry, as C++ sees it with the add and scatter plugins
// linked, agrees with the plugins and with the dispatcher.

#include <torchplug/core/library.h>
#include <torchplug/core/registry.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using torchplug::core::OpInfo;
using torchplug::core::Registry;

#ifdef TORCHPLUG_WITH_CUDA
constexpr bool kWithCuda = true;
#else
constexpr bool kWithCuda = false;
#endif

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

int count_named(const std::string& name) {
  const auto ops = Registry::instance().ops();
  return std::count_if(ops.begin(), ops.end(), [&](const OpInfo& op) { return op.name == name; });
}

struct Expected {
  std::string name;
  std::string plugin;
  std::vector<std::string> dtypes;
};

const std::vector<std::string> kScatterDtypes = {"Half",   "BFloat16", "Float",
                                                 "Double", "Int",      "Long"};
const std::vector<Expected> kExpected = {
    {"add", "add", {"Half", "BFloat16", "Float", "Double", "Byte", "Char", "Short", "Int", "Long"}},
    {"scatter_sum", "scatter", kScatterDtypes},
    {"scatter_sum_", "scatter", kScatterDtypes},
};

TEST(Registry, ListsEveryOpOfTheLinkedPlugins) {
  for (const auto& expected : kExpected) {
    SCOPED_TRACE(expected.name);
    EXPECT_EQ(count_named(expected.name), 1);
    const auto op = Registry::instance().find(expected.name);
    ASSERT_TRUE(op.has_value());
    EXPECT_EQ(op->name, expected.name);
    EXPECT_EQ(op->plugin, expected.plugin);
    EXPECT_EQ(op->dtypes, expected.dtypes);
    EXPECT_FALSE(op->doc.empty());
    EXPECT_TRUE(op->differentiable);
    EXPECT_TRUE(contains(op->backends, "CPU"));
    EXPECT_TRUE(contains(op->backends, "Meta"));
    EXPECT_EQ(contains(op->backends, "CUDA"), kWithCuda);
  }
  EXPECT_FALSE(Registry::instance().find("no_such_op").has_value());
}

TEST(Registry, SchemasAgreeWithTheDispatcher) {
  const auto ops = Registry::instance().ops();
  ASSERT_GE(ops.size(), kExpected.size());
  for (const auto& op : ops) {
    SCOPED_TRACE(op.qualified_name());
    EXPECT_EQ(op.ns, "torchplug");
    const auto handle = c10::Dispatcher::singleton().findSchema({op.qualified_name(), ""});
    ASSERT_TRUE(handle.has_value());
    const auto declared = torch::schema((op.ns + "::" + op.schema).c_str());
    EXPECT_EQ(c10::toString(declared), c10::toString(handle->schema()));
    EXPECT_TRUE(declared == handle->schema());
  }
}

TEST(Registry, RefusesASecondDefinition) {
  const auto before = Registry::instance().ops().size();
  try {
    Registry::instance().add("torchplug", "impostor", {"scatter_sum(Tensor x) -> Tensor", {}, "again"});
    ADD_FAILURE() << "a second scatter_sum was accepted";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find("'torchplug::scatter_sum'"), std::string::npos) << message;
    EXPECT_NE(message.find("impostor"), std::string::npos) << message;
  }

  // Through a library block's define(), as a plugin would: refused before the
  // dispatcher sees it, with the op named.
  torch::Library library(torch::Library::FRAGMENT, "torchplug", std::nullopt, __FILE__, __LINE__);
  torchplug::core::Library block(library, "torchplug", "impostor", std::nullopt);
  try {
    block.define({"add(Tensor a, Tensor b) -> Tensor", {}, ""});
    ADD_FAILURE() << "a second add was accepted";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find("'torchplug::add'"), std::string::npos) << message;
    EXPECT_NE(message.find("already registered"), std::string::npos) << message;
  }

  EXPECT_EQ(Registry::instance().ops().size(), before);
  EXPECT_EQ(Registry::instance().find("scatter_sum")->plugin, "scatter");
  EXPECT_EQ(Registry::instance().find("add")->plugin, "add");
}

}  // namespace
