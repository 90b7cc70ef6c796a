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

include(TorchPlugTorch)
message(STATUS "torchplug: CUDA kernels ${TORCHPLUG_CUDA} (TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST})")

