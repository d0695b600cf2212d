# CPack: `cpack -G DEB` (or `cmake --build BUILD --target package`) builds nodecomm_<version>_<arch>.deb.
# Runtime libraries are found with dpkg-shlibdeps from the binaries (Open MPI, hwloc, libnuma,
# Highway, fmt, xxhash, libstdc++); the Depends line below adds what no binary links: Open MPI's
# launcher and runtime (mpirun, orted), which nodecommd's MPI transport and nodecomm-launch run.
set(CPACK_PACKAGE_NAME nodecomm)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "nodecomm")
set(CPACK_PACKAGE_CONTACT "nodecomm maintainers <nodecomm@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "node communication daemon: collectives for training processes through shared memory")
set(CPACK_PACKAGE_DESCRIPTION
    "nodecommd runs the collectives (allreduce and the rest) of a node's training processes: \
they hand it their buffers through shared memory with libnodecomm, and it reduces them and \
drives the inter-node traffic with Open MPI. The package holds nodecommd and its systemd unit, \
libnodecomm with its headers, CMake package and pkg-config file, nodecomm-launch and \
nodecomm-bench, the Python package nodecomm, and libmlsl: Intel MLSL 1.0's API (mlsl.hpp, \
mlsl.h, the Python module mlsl) over libnodecomm, so that programs written for MLSL build with \
-lmlsl and run under nodecomm-launch.")
set(CPACK_RESOURCE_FILE_README ${PROJECT_SOURCE_DIR}/README.md)
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/")
# Install with DESTDIR under the final prefix: the install-time files (unit, nodecomm.pc) then
# name the package's paths, and /etc/nodecomm lands in the package as /etc/nodecomm.
set(CPACK_SET_DESTDIR ON)
if(NOT DEFINED CPACK_INSTALL_PREFIX)
  set(CPACK_INSTALL_PREFIX /usr)
endif()
set(CPACK_PACKAGING_INSTALL_PREFIX ${CPACK_INSTALL_PREFIX})
# Only the default component: the torch backend (component `torch`, python/torch_backend)
# links libtorch, which the package must not depend on.
set(CPACK_INSTALL_CMAKE_PROJECTS "${PROJECT_BINARY_DIR};${PROJECT_NAME};Unspecified;/")

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${PROJECT_BINARY_DIR}/lib")
set(CPACK_DEBIAN_PACKAGE_DEPENDS "openmpi-bin")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "iproute2")
# Maintainer scripts (create the service user, reload systemd; the service is not enabled by
# the package) and the configuration file as a conffile.
set(_nc_debian ${NODECOMM_PACKAGING_DIR}/debian)
foreach(_nc_script postinst prerm postrm)
  file(COPY ${PROJECT_SOURCE_DIR}/cmake/debian/${_nc_script} DESTINATION ${_nc_debian}
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                        WORLD_READ WORLD_EXECUTE)
endforeach()
file(WRITE ${_nc_debian}/conffiles "/etc/nodecomm/nodecommd.conf\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${_nc_debian}/postinst;${_nc_debian}/prerm;${_nc_debian}/postrm;${_nc_debian}/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
