# Fails when a layer includes a layer it does not declare it uses (dptrain_layer in
# src/<layer>/CMakeLists.txt, written out by cmake/dptrainLayers.cmake), naming every such include
# with its file and line. Run as a build step:
#   cmake -DROOT=<source dir> -DLAYERS=<build dir>/layers.cmake -DSTAMP=<file to touch when clean>
#         -P cmake/check_layers.cmake
include("${LAYERS}")
set(wrong "")
foreach(layer IN LISTS dptrain_layers)
  file(GLOB_RECURSE files "${ROOT}/include/dptrain/${layer}/*.h" "${ROOT}/src/${layer}/*.h" "${ROOT}/src/${layer}/*.cpp")
  if(EXISTS "${ROOT}/include/dptrain/${layer}.h")
    list(APPEND files "${ROOT}/include/dptrain/${layer}.h")
  endif()
  set(may_use ${layer} ${dptrain_layer_uses_${layer}})
  foreach(file IN LISTS files)
    file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"dptrain/")
    foreach(line IN LISTS lines)
      string(REGEX MATCH "dptrain/([a-z_]+)[/.]" _ "${line}")
      list(FIND may_use "${CMAKE_MATCH_1}" declared)
      if(declared EQUAL -1)
        file(RELATIVE_PATH where "${ROOT}" "${file}")
        list(JOIN may_use ", " allowed)
        string(APPEND wrong "  ${where}: ${line} (${layer} may use only ${allowed})\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(wrong)
  message(FATAL_ERROR "an include points outside what its layer declares it uses:\n${wrong}"
                      "Move the code to a layer that may know both, pass what it needs from above, "
                      "or, if the layer graph should change, declare the use in src/<layer>/CMakeLists.txt "
                      "(a layer may use only the layers before it).")
endif()
file(TOUCH "${STAMP}")
