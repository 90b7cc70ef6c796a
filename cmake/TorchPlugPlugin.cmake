# torchplug_add_plugin(<name> HEADER <public header> SOURCES <cpp...>
#                      CUDA_SOURCES <cu...> TESTS <gtest cpp...>
#                      [DEPENDS <plugin...>])
#
# Builds libtorchplug_<name>, a shared library linkable on its own (target
# torchplug::<name>), installs its public header as torchplug/ops/<header>.
# CUDA sources are compiled only when the CUDA kernels are enabled; the
# GoogleTest suite only with TORCHPLUG_BUILD_TESTS. DEPENDS names plugins
# whose libraries and headers this one builds on (composite on scatter).
function(torchplug_add_plugin name)
  cmake_parse_arguments(PLUGIN "" "HEADER" "SOURCES;CUDA_SOURCES;TESTS;DEPENDS" ${ARGN})
  set(_sources ${PLUGIN_SOURCES})
  if(TORCHPLUG_CUDA)
    list(APPEND _sources ${PLUGIN_CUDA_SOURCES})
  endif()

  set(_target torchplug_${name})
  add_library(${_target} SHARED ${_sources})
  add_library(torchplug::${name} ALIAS ${_target})
  list(TRANSFORM PLUGIN_DEPENDS PREPEND torchplug_)
  target_link_libraries(${_target} PUBLIC torchplug_core ${PLUGIN_DEPENDS} PRIVATE ${TORCHPLUG_OPENMP_LIBRARIES})
  target_compile_options(${_target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TORCHPLUG_OPENMP_FLAGS}>)
  set_target_properties(${_target} PROPERTIES
    EXPORT_NAME ${name}
    INSTALL_RPATH "$ORIGIN"
    INSTALL_RPATH_USE_LINK_PATH TRUE)
  if(TORCHPLUG_CUDA)
    target_compile_definitions(${_target} PRIVATE TORCHPLUG_WITH_CUDA)
    target_compile_options(${_target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 -lineinfo>)
  endif()

  # The header lives next to the kernels; consumers include it as <torchplug/ops/NAME.h>.
  set(_include_root ${CMAKE_CURRENT_BINARY_DIR}/include)
  configure_file(${PLUGIN_HEADER} ${_include_root}/torchplug/ops/${PLUGIN_HEADER} COPYONLY)
  target_include_directories(${_target} PUBLIC
    $<BUILD_INTERFACE:${_include_root}>
    $<INSTALL_INTERFACE:include>)

  install(TARGETS ${_target} EXPORT TorchPlugTargets LIBRARY DESTINATION lib)
  install(FILES ${PLUGIN_HEADER} DESTINATION include/torchplug/ops)
  set_property(GLOBAL APPEND PROPERTY TORCHPLUG_PLUGINS ${name})

  if(TORCHPLUG_BUILD_TESTS AND PLUGIN_TESTS)
    torchplug_add_test(test_${name} SOURCES ${PLUGIN_TESTS} LIBRARIES ${_target})
  endif()
endfunction()

# torchplug_table_rows(<var> <header>)
#
# The rows `_(name, Type)` of the TORCHPLUG_FOR_EACH_* table in <header> (one
# a line), as name=Type items: the reductions an op family compiles for.
function(torchplug_table_rows out header)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${header})  # a new row reconfigures
  file(READ ${header} _text)
  string(REGEX MATCHALL "\n  _\\([a-z_]+, [:a-zA-Z_]+\\)" _rows "${_text}")
  set(_items)
  foreach(_row IN LISTS _rows)
    string(REGEX REPLACE "\n  _\\(([a-z_]+), ([:a-zA-Z_]+)\\)" "\\1=\\2" _row "${_row}")
    list(APPEND _items ${_row})
  endforeach()
  if(NOT _items)
    message(FATAL_ERROR "torchplug_table_rows: no `  _(name, Type)` rows in ${header}")
  endif()
  set(${out} ${_items} PARENT_SCOPE)
endfunction()

# torchplug_cuda_instantiations(<var> <header> <code> <row>...)
#
# One CUDA translation unit per row (name=Type, or Type alone), named
# <stem of header>_<name>.cu in the build tree: <header> included, then <code>
# with @TYPE@ replaced by the row's type, so that nvcc builds the kernels of
# each reduction or program in parallel. Lists the generated sources in <var>.
function(torchplug_cuda_instantiations out header code)
  get_filename_component(_stem ${header} NAME_WE)
  set(_sources)
  foreach(_row IN LISTS ARGN)
    string(FIND "${_row}" "=" _at)
    if(_at EQUAL -1)
      set(_name ${_row})
      set(_type ${_row})
    else()
      string(SUBSTRING "${_row}" 0 ${_at} _name)
      math(EXPR _after "${_at} + 1")
      string(SUBSTRING "${_row}" ${_after} -1 _type)
    endif()
    string(REPLACE "@TYPE@" "${_type}" _code "${code}")
    set(_source ${CMAKE_CURRENT_BINARY_DIR}/${_stem}_${_name}.cu)
    file(CONFIGURE OUTPUT ${_source} CONTENT "#include \"${CMAKE_CURRENT_SOURCE_DIR}/${header}\"\n\n${_code}" @ONLY)
    list(APPEND _sources ${_source})
  endforeach()
  set(${out} ${_sources} PARENT_SCOPE)
endfunction()
