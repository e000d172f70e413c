# Installs the library so that another project can use it with find_package(dptrain), the CLI,
# the guides and the examples (as sources, to read and copy); cmake/dptrainPackage.cmake makes a
# Debian package of the same.
include(CMakePackageConfigHelpers)
get_property(DPTRAIN_LAYER_TARGETS GLOBAL PROPERTY DPTRAIN_LAYER_TARGETS)
install(TARGETS dptrain dptrain_torch ${DPTRAIN_LAYER_TARGETS} EXPORT dptrainTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/dptrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT dptrainTargets NAMESPACE dptrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dptrain)
configure_package_config_file(cmake/dptrainConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/dptrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dptrain)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/dptrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/dptrainConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/dptrainConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dptrain)
if(DPTRAIN_BUILD_TOOLS)
  install(TARGETS dptrain_cli dptrain_torch_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs examples DESTINATION ${CMAKE_INSTALL_DOCDIR})
