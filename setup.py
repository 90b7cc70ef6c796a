"""`pip install --no-build-isolation .` drives the project's one CMake build.

CMake installs everything (the Python sources, the _C extension, the plugin
libraries, the headers and TorchPlugConfig.cmake) into the package directory,
so the wheel and `cmake --install` hold the same files.
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        package_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(self.build_temp).resolve() / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DTORCHPLUG_BUILD_PYTHON=ON",
            f"-DCMAKE_INSTALL_PREFIX={package_dir}",
            f"-DTORCHPLUG_WITH_CUDA={os.environ.get('TORCHPLUG_WITH_CUDA', 'AUTO')}",
        ]
        if os.environ.get("TORCHPLUG_CUDA_ARCH_LIST"):
            configure.append(f"-DTORCHPLUG_CUDA_ARCH_LIST={os.environ['TORCHPLUG_CUDA_ARCH_LIST']}")
        jobs = str(os.cpu_count() or 1)
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs], check=True)
        subprocess.run(["cmake", "--install", str(build_dir)], check=True)


setup(
    ext_modules=[Extension("torchplug._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
