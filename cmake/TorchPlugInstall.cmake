# Installs the CMake package: find_package(TorchPlug) gives torchplug::core,
# torchplug::<plugin> for every plugin built here, and the plugin SDK.
include(CMakePackageConfigHelpers)

get_property(TORCHPLUG_PLUGINS GLOBAL PROPERTY TORCHPLUG_PLUGINS)
set(_config_dir lib/cmake/TorchPlug)

install(EXPORT TorchPlugTargets NAMESPACE torchplug:: DESTINATION ${_config_dir})
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/TorchPlugConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/TorchPlugConfig.cmake
  INSTALL_DESTINATION ${_config_dir})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/TorchPlugConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/TorchPlugConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/TorchPlugConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/TorchPlugTorch.cmake
  ${CMAKE_CURRENT_LIST_DIR}/TorchPlugPlugin.cmake
  DESTINATION ${_config_dir})
