# Install and packaging. `cmake --install` lays out (GNUInstallDirs):
#   bin/       nodecommd, nodecomm-launch, nodecomm-bench
#   lib*/      libnodecomm.so*, pkgconfig/nodecomm.pc, cmake/nodecomm/ (find_package(nodecomm)
#              -> nodecomm::nodecomm)
#   include/   nodecomm.h, nodecomm.hpp
#   lib/systemd/system/nodecommd.service and nodecomm-rendezvous.service,
#   lib/sysusers.d/nodecomm.conf,
#   lib/tmpfiles.d/nodecomm.conf
#   etc/nodecomm/nodecommd.conf (/etc for the /usr prefix), share/doc/nodecomm/
# `cpack -G DEB` in the build directory builds the .deb (configure with
# -DCMAKE_INSTALL_PREFIX=/usr for a system package).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(NODECOMM_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit goes (relative to the prefix, or absolute)")
set(NODECOMM_SYSUSERSDIR "lib/sysusers.d" CACHE STRING "Where the sysusers.d file goes")
# Open MPI's rendezvous server, which nodecomm-rendezvous.service runs (Debian: openmpi-bin).
set(NODECOMM_OMPI_SERVER "/usr/bin/ompi-server" CACHE FILEPATH
    "ompi-server as nodecomm-rendezvous.service runs it (an absolute path on the installed system)")
set(NODECOMM_TMPFILESDIR "lib/tmpfiles.d" CACHE STRING "Where the tmpfiles.d file goes")
set(NODECOMM_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/nodecomm" CACHE STRING
    "Where the CMake package files go")
set(NODECOMM_PACKAGING_DIR "${PROJECT_BINARY_DIR}/packaging")

# Programs. nodecomm-launch installs itself (tools/launch); it finds nodecommd beside itself.
install(TARGETS nodecommd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET nodecomm-bench)
  # It links libnodecomm: find it in the installed tree wherever that is.
  set_property(TARGET nodecomm-bench PROPERTY INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  install(TARGETS nodecomm-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# libnodecomm. Its build-tree include directories must not reach the installed package.
get_target_property(_nc_includes nodecomm INTERFACE_INCLUDE_DIRECTORIES)
set(_nc_build_includes "")
foreach(_nc_dir IN LISTS _nc_includes)
  if(_nc_dir MATCHES "^\\$<")
    list(APPEND _nc_build_includes "${_nc_dir}")
  else()
    list(APPEND _nc_build_includes "$<BUILD_INTERFACE:${_nc_dir}>")
  endif()
endforeach()
set_property(TARGET nodecomm PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_nc_build_includes}")
install(TARGETS nodecomm EXPORT nodecommTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/client/include/nodecomm.h
              ${PROJECT_SOURCE_DIR}/client/include/nodecomm.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The CMake package.
install(EXPORT nodecommTargets NAMESPACE nodecomm:: DESTINATION ${NODECOMM_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/nodecommConfig.cmake.in
                              ${NODECOMM_PACKAGING_DIR}/nodecommConfig.cmake
                              INSTALL_DESTINATION ${NODECOMM_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${NODECOMM_PACKAGING_DIR}/nodecommConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${NODECOMM_PACKAGING_DIR}/nodecommConfig.cmake
              ${NODECOMM_PACKAGING_DIR}/nodecommConfigVersion.cmake
        DESTINATION ${NODECOMM_CMAKEDIR})

# Files that name installed paths (the unit's ExecStart=, nodecomm.pc's prefix) are written at
# install time for the prefix installed to, so `cmake --install --prefix DIR` and CPack get
# files that are right for where they land.
configure_file(${PROJECT_SOURCE_DIR}/cmake/NodecommInstallFiles.cmake.in
               ${NODECOMM_PACKAGING_DIR}/NodecommInstallFiles.cmake @ONLY)
install(SCRIPT ${NODECOMM_PACKAGING_DIR}/NodecommInstallFiles.cmake)

# Documentation and the example configuration.
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/OPERATIONS.md
              ${PROJECT_SOURCE_DIR}/docs/TOOLS.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/systemd/nodecommd.conf
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

include(${PROJECT_SOURCE_DIR}/cmake/NodecommPackaging.cmake)
