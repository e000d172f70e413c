# One static library per layer (docs/architecture.md), each linking only the layers it declares it
# uses. The declarations are the one statement of the layer graph: the link lines follow them, and
# cmake/check_layers.cmake refuses, before anything compiles, an include of a layer that its
# includer did not declare.
#
#   dptrain_layer(<layer> [USES <layer>...] [WITHOUT_LIBTORCH])
#
# opens src/<layer>/CMakeLists.txt and makes the library dptrain_<layer> (alias dptrain::<layer>)
# for the sources listed after it. A layer may use only layers declared before it, so the graph
# cannot grow a cycle. WITHOUT_LIBTORCH keeps LibTorch off the link line (only its header-only <torch/arg.h> is reachable): the launcher
# starts in milliseconds because of it.
#
#   dptrain_layer_part(<target> OF <layer> [USES <layer>...])
#
# adds a second library to a layer, for sources that need more than the layer's own library may
# link (the elastic launch meets over LibTorch's store; the light launcher must not load LibTorch).
# What the part uses counts as the layer's for the include check.

# What every layer on LibTorch links: the library itself, and what dptrain found it built with.
add_library(dptrain_torch INTERFACE)
target_link_libraries(dptrain_torch INTERFACE ${TORCH_LIBRARIES} Threads::Threads)
target_compile_definitions(dptrain_torch INTERFACE ${DPTRAIN_PUBLIC_DEFINITIONS})
if(DPTRAIN_GLOO_INCLUDE_DIR)
  target_include_directories(dptrain_torch SYSTEM INTERFACE $<BUILD_INTERFACE:${DPTRAIN_GLOO_INCLUDE_DIR}>)
endif()

# PyTorch's wheels export std::filesystem functions of their own static libstdc++ (PyTorch issue
# 133437), and every program that lists libtorch before libstdc++ calls those: std::filesystem::
# remove_all crashed every test that used a temporary folder on a GPU machine's PyTorch 2.11.
# Naming the shared libstdc++ first makes the system's the one every call finds. A toolchain
# with only a static libstdc++ (the GPU image's /opt/gcc: `-lstdc++` then added no DT_NEEDED at
# all, and every std:: symbol bound to libtorch's copies) gets the shared one the loader would
# load anyway; scripts/gpu-check checks the result with readelf.
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE DPTRAIN_COMPILER_LIBSTDCXX OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(IS_ABSOLUTE "${DPTRAIN_COMPILER_LIBSTDCXX}")
    set(DPTRAIN_LIBSTDCXX -lstdc++)
  else()
    find_library(DPTRAIN_SHARED_LIBSTDCXX NAMES libstdc++.so.6 REQUIRED)
    set(DPTRAIN_LIBSTDCXX "${DPTRAIN_SHARED_LIBSTDCXX}")
    message(STATUS "dptrain: ${CMAKE_CXX_COMPILER} has no shared libstdc++; linking ${DPTRAIN_LIBSTDCXX} first")
  endif()
  target_link_options(dptrain_torch INTERFACE "SHELL:-Wl,--push-state,--no-as-needed ${DPTRAIN_LIBSTDCXX} -Wl,--pop-state")
endif()

set(DPTRAIN_LAYERS_FILE ${CMAKE_BINARY_DIR}/layers.cmake)
file(WRITE ${DPTRAIN_LAYERS_FILE} "# Written by cmake/dptrainLayers.cmake: the layers and what each may use.\n")

# Links `target` to the layers `layer` uses, after checking they were declared before it, and
# records them for the include check.
function(dptrain_use_layers target layer)
  foreach(used IN LISTS ARGN)
    if(NOT TARGET dptrain_${used} OR used STREQUAL layer)
      message(FATAL_ERROR "dptrain: layer '${layer}' uses '${used}', which is not a layer declared "
                          "before it (cmake/dptrainLayers.cmake: layers stack, without cycles)")
    endif()
    target_link_libraries(${target} PUBLIC dptrain_${used})
  endforeach()
  set_property(GLOBAL APPEND PROPERTY DPTRAIN_LAYER_USES_${layer} ${ARGN})
  get_property(uses GLOBAL PROPERTY DPTRAIN_LAYER_USES_${layer})
  file(APPEND ${DPTRAIN_LAYERS_FILE} "set(dptrain_layer_uses_${layer} ${uses})\n")
endfunction()

function(dptrain_layer_library target)
  add_library(${target})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  add_dependencies(${target} dptrain_layers)
  set_property(GLOBAL APPEND PROPERTY DPTRAIN_LAYER_TARGETS ${target})
endfunction()

function(dptrain_layer layer)
  cmake_parse_arguments(arg "WITHOUT_LIBTORCH" "" "USES" ${ARGN})
  set(target dptrain_${layer})
  dptrain_layer_library(${target})
  add_library(dptrain::${layer} ALIAS ${target})
  dptrain_use_layers(${target} ${layer} ${arg_USES})
  if(arg_WITHOUT_LIBTORCH)
    target_include_directories(${target} SYSTEM PUBLIC "$<BUILD_INTERFACE:${TORCH_INCLUDE_DIRS}>")
    target_link_libraries(${target} PUBLIC Threads::Threads)
  else()
    target_link_libraries(${target} PUBLIC dptrain_torch PRIVATE fmt::fmt)
    dptrain_use_pch(${target})
  endif()
  file(APPEND ${DPTRAIN_LAYERS_FILE} "list(APPEND dptrain_layers ${layer})\n")
endfunction()

function(dptrain_layer_part target)
  cmake_parse_arguments(arg "" "OF" "USES" ${ARGN})
  dptrain_layer_library(${target})
  dptrain_use_layers(${target} ${arg_OF} ${arg_USES})
  target_link_libraries(${target} PUBLIC dptrain_${arg_OF} dptrain_torch PRIVATE fmt::fmt)
  dptrain_use_pch(${target})
endfunction()
