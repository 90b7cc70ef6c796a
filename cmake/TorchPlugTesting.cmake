# GoogleTest for the per-op C++ suites: the installed package when there is
# one, else the sources in TORCHPLUG_GTEST_SOURCE_DIR (or Debian's /usr/src/googletest).
enable_testing()
include(GoogleTest)

find_package(GTest QUIET)
if(NOT GTest_FOUND)
  if(NOT TORCHPLUG_GTEST_SOURCE_DIR AND EXISTS /usr/src/googletest/CMakeLists.txt)
    set(TORCHPLUG_GTEST_SOURCE_DIR /usr/src/googletest)
  endif()
  if(NOT TORCHPLUG_GTEST_SOURCE_DIR)
    message(FATAL_ERROR "TORCHPLUG_BUILD_TESTS needs GoogleTest: install it or set TORCHPLUG_GTEST_SOURCE_DIR")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(${TORCHPLUG_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  add_library(GTest::gtest_main ALIAS gtest_main)
endif()

# Every GoogleTest executable, and nothing else: `cmake --build <dir> --target
# torchplug_tests` builds what ctest's gtest cases need (the sanitizer run uses it).
add_custom_target(torchplug_tests)

# torchplug_add_test(<name> SOURCES <cpp...> LIBRARIES <targets...>)
function(torchplug_add_test name)
  cmake_parse_arguments(TEST "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_executable(${name} ${TEST_SOURCES})
  # torch itself: its CUDA hooks load with it, so the CUDA cases see the GPU.
  target_link_libraries(${name} PRIVATE ${TEST_LIBRARIES} torch GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/cpp)
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60)
  add_dependencies(torchplug_tests ${name})
endfunction()
