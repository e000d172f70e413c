# Finds what dptrain builds against. Any LibTorch works: Debian's 1.13 CPU build or a 2.x CUDA build
# (point CMAKE_PREFIX_PATH at it). Everything else comes from Debian packages (scripts/install-deps).
include(GNUInstallDirs)
find_package(Threads REQUIRED)
find_package(Torch REQUIRED)
# dptrain is C++17, but LibTorch's headers may need a later standard (2.14's refuse anything
# before C++20). TorchConfig.cmake names it on its imported target, where it does not reach the
# targets that link it: every dptrain target takes the later of the two.
get_target_property(DPTRAIN_TORCH_CXX_STANDARD torch CXX_STANDARD)
if(DPTRAIN_TORCH_CXX_STANDARD GREATER CMAKE_CXX_STANDARD)
  message(STATUS "dptrain: C++${DPTRAIN_TORCH_CXX_STANDARD}, as LibTorch ${Torch_VERSION} asks")
  set(CMAKE_CXX_STANDARD ${DPTRAIN_TORCH_CXX_STANDARD})
endif()
find_package(fmt REQUIRED)

set(DPTRAIN_PUBLIC_DEFINITIONS "")

# c10d's Gloo backend needs gloo's headers; LibTorch wheels ship them, Debian has libgloo-dev.
find_path(DPTRAIN_GLOO_INCLUDE_DIR gloo/algorithm.h HINTS ${TORCH_INCLUDE_DIRS})
if(DPTRAIN_GLOO_INCLUDE_DIR)
  list(APPEND DPTRAIN_PUBLIC_DEFINITIONS DPTRAIN_WITH_GLOO=1)
  message(STATUS "dptrain: Gloo backend enabled (headers in ${DPTRAIN_GLOO_INCLUDE_DIR})")
else()
  message(WARNING "dptrain: Gloo headers (gloo/algorithm.h) not found, so the CPU backend 'gloo' is "
                  "disabled and only 'nccl' remains. On Debian: apt-get install libgloo-dev.")
endif()

# NCCL comes with CUDA builds of LibTorch; c10d compiles its NCCL group only with USE_C10D_NCCL.
if(TARGET torch_cuda OR CUDA_FOUND)
  list(APPEND DPTRAIN_PUBLIC_DEFINITIONS DPTRAIN_WITH_CUDA=1)
  find_path(DPTRAIN_NCCL_HEADER torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp HINTS ${TORCH_INCLUDE_DIRS})
  if(DPTRAIN_NCCL_HEADER)
    list(APPEND DPTRAIN_PUBLIC_DEFINITIONS DPTRAIN_WITH_NCCL=1 USE_C10D_NCCL)
    message(STATUS "dptrain: CUDA and NCCL enabled")
  endif()
endif()
if(DPTRAIN_REQUIRE_CUDA AND NOT DPTRAIN_NCCL_HEADER)
  message(FATAL_ERROR "dptrain: DPTRAIN_REQUIRE_CUDA is on, but the LibTorch found (${Torch_DIR}) has no CUDA "
                      "or no NCCL. Point CMAKE_PREFIX_PATH at a CUDA build of LibTorch.")
endif()

# nlohmann_json (header-only) writes the train layer's metrics.jsonl and the tools' reports.
find_package(nlohmann_json REQUIRED)
if(DPTRAIN_BUILD_TOOLS OR DPTRAIN_BUILD_EXAMPLES)
  find_package(CLI11 REQUIRED)
endif()

# The data layer decodes JPEG with libjpeg-turbo (DCT scaling, partial decoding), PNG with libpng.
find_package(libjpeg-turbo REQUIRED)
find_package(PNG REQUIRED)
# Shards over HTTP(S) and from S3-compatible stores (AWS Signature V4 signing) through libcurl.
find_package(CURL REQUIRED)
# The AWS profile files (~/.aws/credentials, ~/.aws/config) are INI, read with SimpleIni, used as
# a header only.
find_path(DPTRAIN_SIMPLEINI_INCLUDE_DIR SimpleIni.h)
if(NOT DPTRAIN_SIMPLEINI_INCLUDE_DIR)
  message(FATAL_ERROR "SimpleIni.h not found: install libsimpleini-dev (scripts/install-deps does)")
endif()
