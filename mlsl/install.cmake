# libmlsl's install rules (included from mlsl/CMakeLists.txt; the Python module installs itself
# in python.cmake). `cmake --install` adds, beside libnodecomm (cmake/NodecommInstall.cmake):
#   lib*/      libmlsl.so* (RUNPATH $ORIGIN: libnodecomm.so.0 beside it), pkgconfig/mlsl.pc,
#              cmake/mlsl/ (find_package(mlsl 1.0) -> mlsl::mlsl)
#   include/   mlsl.hpp, mlsl.h
#   share/doc/nodecomm/MLSL.md
# All of it is in the default component, so the .deb carries it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MLSL_VERSION 1.0.0)
set(NODECOMM_MLSL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/mlsl" CACHE STRING
    "Where the mlsl CMake package files go")
set(MLSL_PACKAGING_DIR "${PROJECT_BINARY_DIR}/packaging/mlsl")

install(TARGETS mlsl EXPORT mlslTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/mlsl.hpp ${CMAKE_CURRENT_SOURCE_DIR}/include/mlsl.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The CMake package. mlsl links nodecomm PRIVATE; for a shared library the export records it
# only as a link dependency (nodecomm::nodecomm, from nodecomm's own export set), which
# mlslConfig.cmake resolves by loading the nodecomm package of the same prefix first.
if(DEFINED NODECOMM_CMAKEDIR)
  set(MLSL_NODECOMM_CMAKEDIR "${NODECOMM_CMAKEDIR}")
else()  # cmake/NodecommInstall.cmake sets the cache variable later, with this default
  set(MLSL_NODECOMM_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/nodecomm")
endif()
install(EXPORT mlslTargets NAMESPACE mlsl:: DESTINATION ${NODECOMM_MLSL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/mlslConfig.cmake.in
                              ${MLSL_PACKAGING_DIR}/mlslConfig.cmake
                              INSTALL_DESTINATION ${NODECOMM_MLSL_CMAKEDIR}
                              PATH_VARS MLSL_NODECOMM_CMAKEDIR)
# MLSL API 1.x: any 1.y serves a program written for 1.0.
write_basic_package_version_file(${MLSL_PACKAGING_DIR}/mlslConfigVersion.cmake
                                 VERSION ${MLSL_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${MLSL_PACKAGING_DIR}/mlslConfig.cmake ${MLSL_PACKAGING_DIR}/mlslConfigVersion.cmake
        DESTINATION ${NODECOMM_MLSL_CMAKEDIR})

# mlsl.pc names installed paths: written at install time for the prefix installed to (the
# nodecomm.pc pattern of cmake/NodecommInstallFiles.cmake.in).
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/mlslInstallFiles.cmake.in
               ${MLSL_PACKAGING_DIR}/mlslInstallFiles.cmake @ONLY)
install(SCRIPT ${MLSL_PACKAGING_DIR}/mlslInstallFiles.cmake)

install(FILES ${PROJECT_SOURCE_DIR}/docs/MLSL.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
