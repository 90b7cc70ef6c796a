# torchplug_add_plugin(<name> SOURCES <cpp...> [CUDA_SOURCES <cu...>] [HEADER <public header>]
#                      [TESTS <gtest cpp...>] [DEPENDS <plugin...>])
#
# One plugin: a shared library that registers its ops when loaded, linkable on
# its own. The same function builds the plugins of this tree and, installed
# with the package (find_package(TorchPlug)), a plugin outside it:
#
#   in this tree    libtorchplug_<name>, target torchplug::<name> of the
#                   TorchPlug package, header <torchplug/ops/HEADER>
#   outside it      lib<name>, target <name>::<name> of the plugin's own
#                   package (<name>Config.cmake), header <<name>/HEADER>
#
# It links torchplug::core, compiles the CPU sources with torch's OpenMP (else
# at::parallel_for runs on one thread) and the CUDA sources only where the
# package was built with CUDA kernels, for its architectures; a plugin without
# CUDA sources does not need libtorch_cuda. DEPENDS names torchplug plugins
# whose ops it calls through the dispatcher (composite on scatter): their
# libraries load with it; TESTS, GoogleTest suites (this tree).
function(torchplug_add_plugin name)
  cmake_parse_arguments(PLUGIN "" "HEADER" "SOURCES;CUDA_SOURCES;TESTS;DEPENDS" ${ARGN})
  if(NOT name MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "torchplug_add_plugin: '${name}' is not a C identifier (it names the library and its manifest)")
  endif()
  if(TARGET torchplug_core)  # this tree
    set(_target torchplug_${name})
    set(_export TorchPlugTargets)
    set(_header_dir torchplug/ops)
    set(_alias torchplug::${name})
  else()
    set(_target ${name})
    set(_export ${name}Targets)
    set(_header_dir ${name})
    set(_alias ${name}::${name})
    if(PLUGIN_CUDA_SOURCES AND NOT TORCHPLUG_CUDA)
      message(WARNING "torchplug_add_plugin(${name}): built without its CUDA sources (the installed torchplug "
                      "has no CUDA kernels, or no CUDA compiler was found)")
    endif()
  endif()

  set(_sources ${PLUGIN_SOURCES} ${CMAKE_CURRENT_BINARY_DIR}/${name}_manifest.cpp)
  set(_torch torchplug_torch_cpu)
  if(TORCHPLUG_CUDA AND PLUGIN_CUDA_SOURCES)
    list(APPEND _sources ${PLUGIN_CUDA_SOURCES})
    set(_torch torch)
  endif()
  # Read by torchplug.load_plugin from the file, before it loads the library.
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${name}_manifest.cpp CONTENT [[
#include <torch/headeronly/version.h>
extern "C" __attribute__((used, visibility("default"))) const char torchplug_plugin_manifest_@name@[] =
    "torchplug-plugin;name=@name@;torch=" TORCH_VERSION ";torchplug=@TorchPlug_VERSION@;";
]] @ONLY)

  add_library(${_target} SHARED ${_sources})
  add_library(${_alias} ALIAS ${_target})
  # A plugin named in DEPENDS is called through the dispatcher, with no symbol
  # of its library used: linked as needed, a C++ program would never load it.
  list(TRANSFORM PLUGIN_DEPENDS PREPEND torchplug::)
  if(PLUGIN_DEPENDS)
    set(PLUGIN_DEPENDS -Wl,--push-state,--no-as-needed ${PLUGIN_DEPENDS} -Wl,--pop-state)
  endif()
  target_link_libraries(${_target} PUBLIC torchplug::core PRIVATE ${PLUGIN_DEPENDS} ${_torch} ${TORCHPLUG_OPENMP_LIBRARIES})
  target_compile_options(${_target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TORCHPLUG_OPENMP_FLAGS}>)
  target_compile_definitions(${_target} PRIVATE TORCHPLUG_PLUGIN_NAME="${name}")
  # Refuses torch's registration macros, whose clashes abort the process.
  target_compile_options(${_target} PRIVATE "SHELL:-include torchplug/core/plugin_prelude.h")
  # Symbols of static archives stay private to the plugin: where the toolchain
  # links libstdc++ statically (the GPU machine's), another library binding to
  # this copy crashes every error path. This tree sets it for all its targets.
  target_link_options(${_target} PRIVATE "LINKER:--exclude-libs,ALL")
  set_target_properties(${_target} PROPERTIES
    EXPORT_NAME ${name}
    INSTALL_RPATH "$ORIGIN"
    INSTALL_RPATH_USE_LINK_PATH TRUE)
  if(TORCHPLUG_CUDA AND PLUGIN_CUDA_SOURCES)
    target_compile_definitions(${_target} PRIVATE TORCHPLUG_WITH_CUDA)
    target_compile_options(${_target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 -lineinfo>)
  endif()

  set(_include_root ${CMAKE_CURRENT_BINARY_DIR}/include)
  target_include_directories(${_target} PUBLIC $<BUILD_INTERFACE:${_include_root}> $<INSTALL_INTERFACE:include>)
  if(PLUGIN_HEADER)
    configure_file(${PLUGIN_HEADER} ${_include_root}/${_header_dir}/${PLUGIN_HEADER} COPYONLY)
    install(FILES ${PLUGIN_HEADER} DESTINATION include/${_header_dir})
  endif()
  install(TARGETS ${_target} EXPORT ${_export} LIBRARY DESTINATION lib)

  if(TARGET torchplug_core)
    set_property(GLOBAL APPEND PROPERTY TORCHPLUG_PLUGINS ${name})
    if(TORCHPLUG_BUILD_TESTS AND PLUGIN_TESTS)
      torchplug_add_test(test_${name} SOURCES ${PLUGIN_TESTS} LIBRARIES ${_target})
    endif()
  else()
    # The plugin's own package: find_package(<name> [version]) gives
    # <name>::<name>, with the torchplug release it was built against
    # (major.minor, as load_plugin checks) and the project's VERSION if set.
    install(EXPORT ${_export} NAMESPACE ${name}:: DESTINATION lib/cmake/${name})
    file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${name}Config.cmake CONTENT [[
include(CMakeFindDependencyMacro)
find_dependency(TorchPlug @TorchPlug_VERSION_MAJOR@.@TorchPlug_VERSION_MINOR@)
include("${CMAKE_CURRENT_LIST_DIR}/@name@Targets.cmake")
]] @ONLY)
    set(_package_files ${CMAKE_CURRENT_BINARY_DIR}/${name}Config.cmake)
    if(PROJECT_VERSION)
      include(CMakePackageConfigHelpers)
      write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/${name}ConfigVersion.cmake
                                       VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
      list(APPEND _package_files ${CMAKE_CURRENT_BINARY_DIR}/${name}ConfigVersion.cmake)
    endif()
    install(FILES ${_package_files} DESTINATION lib/cmake/${name})
  endif()
endfunction()
