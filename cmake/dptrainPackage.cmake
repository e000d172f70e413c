# `cmake --build build --target package`: a Debian package of what `cmake --install` installs (the
# CLI with its manual page and bash completion, the libraries with headers and CMake config, the
# Python module, the docs and the examples), for the LibTorch this build found:
#
#   dptrain_<version>+torch<M.m>_amd64.deb      apt install ./dptrain_*.deb
#
# Its dependencies are runtime packages only: dpkg-shlibdeps reads them off the programs and the
# Python module (libtorch1.13 or libtorch2.6, libcurl, libjpeg, ...). The Python module works only
# with the python3-torch of the same LibTorch (it links libtorch_python) and only with the Python
# whose ABI tag it carries, so both are bounded to that minor version: a package built against
# LibTorch 1.13 cannot be installed next to 2.6, nor the reverse; apt names the dependency.
# What building against the installed library takes (the LibTorch headers, a compiler) is only
# suggested: running needs none of it.

string(REGEX MATCH "^[0-9]+\\.[0-9]+" torch_minor "${Torch_VERSION}")
if(NOT torch_minor)
  message(FATAL_ERROR "dptrain: LibTorch's version '${Torch_VERSION}' has no MAJOR.MINOR, which the package's name and "
                      "dependencies carry")
endif()
# The first version past this minor one: 1.13 -> 1.14, 2.6 -> 2.7.
string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\1" torch_major "${torch_minor}")
string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\2" torch_minor_number "${torch_minor}")
math(EXPR torch_next_minor_number "${torch_minor_number} + 1")
set(torch_next_minor "${torch_major}.${torch_next_minor_number}")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dptrain)
# The package's version is the project's (CMakeLists.txt's project(), the one place it is written),
# marked with the LibTorch it holds, so that the two builds' files never share a name.
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}+torch${torch_minor}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "dptrain developers <dptrain@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "data-parallel training of image classifiers on LibTorch")
set(CPACK_PACKAGE_DESCRIPTION
    "dptrain trains image classifiers data-parallel across processes, GPUs and machines: a launcher with
rendezvous and elastic restarts, DistributedDataParallel and the other tutorial styles, a threaded
input pipeline over image folders and tar shards (local, HTTP, S3), checkpoints that resume
exactly. Built against LibTorch ${Torch_VERSION}. Holds the dptrain command, its C++ library with
headers and CMake config (find_package(dptrain)), and the Python module (import dptrain).")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(TARGET dptrain_python)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3-torch (>= ${torch_minor}~), python3-torch (<< ${torch_next_minor}~), \
python3 (>= ${DPTRAIN_PYTHON_VERSION}~), python3 (<< ${DPTRAIN_PYTHON_NEXT_VERSION})")
  # Removing the package removes the bytecode Python wrote beside the module when it was imported.
  set(DPTRAIN_PYTHON_PACKAGE_PATH "${CPACK_PACKAGING_INSTALL_PREFIX}/${DPTRAIN_PYTHON_INSTALL_DIR}/dptrain")
  configure_file(${CMAKE_CURRENT_LIST_DIR}/deb-prerm.in ${CMAKE_BINARY_DIR}/package/prerm @ONLY)
  set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/package/prerm)
  set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
endif()
# LibTorch's CPU kernels call BLAS outside oneDNN; Debian's reference BLAS runs them some 20x slower
# (scripts/install-deps says more).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS libopenblas0-openmp)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libtorch-dev, libgloo-dev, libfmt-dev, libturbojpeg0-dev, libjpeg62-turbo-dev, libpng-dev, \
libcurl4-openssl-dev, cmake, g++")
set(CPACK_STRIP_FILES ON)

include(CPack)
