# What every torchplug library, built here or against the installed package,
# takes from torch: included by TorchPlugDependencies (this tree) and by
# TorchPlugConfig (a plugin built outside it), after find_package(Torch).
#
#   TORCHPLUG_OPENMP_FLAGS, TORCHPLUG_OPENMP_LIBRARIES  for the CPU kernels
#   TORCHPLUG_CUDA                                      whether CUDA sources are built
#   torchplug_torch_cpu                                 torch without its CUDA libraries
#
# Set TORCHPLUG_WITH_CUDA (AUTO, ON or OFF) before including it.

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
  set(TORCHPLUG_OPENMP_FLAGS "")
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

# The torch target brings libtorch_cuda and libc10_cuda; a library without
# CUDA code links this instead and loads on a machine without them.
if(NOT TARGET torchplug_torch_cpu)
  add_library(torchplug_torch_cpu INTERFACE IMPORTED GLOBAL)
  target_link_libraries(torchplug_torch_cpu INTERFACE torch_cpu c10)
  target_include_directories(torchplug_torch_cpu INTERFACE ${TORCH_INCLUDE_DIRS})
  separate_arguments(_torch_cxx_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(torchplug_torch_cpu INTERFACE ${_torch_cxx_flags})
endif()
