# Finds Torch (from the installed Python package unless Torch_DIR is given)
# and decides whether the CUDA kernels are built.

find_package(Python3 COMPONENTS Interpreter)

if(NOT Torch_DIR AND Python3_Interpreter_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _torch_found)
  if(_torch_found EQUAL 0)
    list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
  endif()
endif()

# Torch's own CMake reads TORCH_CUDA_ARCH_LIST; without it, it builds for a long
# list of architectures. Hopper (9.0) is where this project's GPU figures come from.
set(TORCHPLUG_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA architectures, in TORCH_CUDA_ARCH_LIST form (e.g. \"8.0;9.0\")")
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST ${TORCHPLUG_CUDA_ARCH_LIST})
endif()

find_package(Torch REQUIRED)

# at::parallel_for is inline: in an OpenMP build of torch (ATen/ParallelOpenMP.h)
# it splits the work across threads only when the calling code is compiled with
# OpenMP itself, and runs on one thread otherwise. The plugins link the
# libgomp.so.1 torch ships where there is one, so the process keeps one runtime.
find_package(OpenMP COMPONENTS CXX)
find_library(TORCHPLUG_TORCH_GOMP NAMES libgomp.so.1 PATHS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
if(OpenMP_CXX_FOUND AND TORCHPLUG_TORCH_GOMP AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(TORCHPLUG_OPENMP_FLAGS ${OpenMP_CXX_FLAGS})
  set(TORCHPLUG_OPENMP_LIBRARIES ${TORCHPLUG_TORCH_GOMP})
elseif(OpenMP_CXX_FOUND)
  set(TORCHPLUG_OPENMP_LIBRARIES OpenMP::OpenMP_CXX)
else()
  message(WARNING "torchplug: no OpenMP for the C++ compiler; the CPU kernels run on one thread")
endif()

if(TORCHPLUG_WITH_CUDA STREQUAL "OFF")
  set(TORCHPLUG_CUDA OFF)
elseif(CMAKE_CUDA_COMPILER AND CAFFE2_USE_CUDA)
  set(TORCHPLUG_CUDA ON)
elseif(TORCHPLUG_WITH_CUDA STREQUAL "ON")
  message(FATAL_ERROR "TORCHPLUG_WITH_CUDA=ON, but no CUDA compiler or no CUDA build of torch was found")
else()
  set(TORCHPLUG_CUDA OFF)
endif()
message(STATUS "torchplug: CUDA kernels ${TORCHPLUG_CUDA} (TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST})")

# The torch target carries libtorch's include paths and ABI flag. libtorch_python
# is never needed: ops go through the dispatcher and the extension only speaks pybind11.
set(TORCHPLUG_TORCH_LIBRARIES ${TORCH_LIBRARIES})
list(FILTER TORCHPLUG_TORCH_LIBRARIES EXCLUDE REGEX "torch_python")
