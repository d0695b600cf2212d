# libmlsl as its users build it (docs/TESTING.md). From the build tree by hand: `c++ -std=c++98` and
# `-std=c++20` with -I build/include -L build/lib -lmlsl only, and a C89 program over mlsl.h;
# each needs libmlsl.so.1 and not libnodecomm, and runs on 2x2 (build_by_hand.sh). From the
# installed tree (the packaging tests' `cmake --install` fixture, tests/packaging): through
# find_package(mlsl 1.0) and through pkg-config, run under the installed nodecomm-launch on 2x2,
# and the installed Python module loading the installed libmlsl (mlsl_consumer_check.sh).
add_test(NAME mlsl_build_by_hand
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/build_by_hand.sh ${PROJECT_BINARY_DIR}
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(mlsl_build_by_hand PROPERTIES LABELS "integration;mlsl" TIMEOUT 300)

# The Python module's check needs the module installed (mlsl/python.cmake) and an interpreter.
set(_mlsl_py_args "")
if(EXISTS ${PROJECT_SOURCE_DIR}/mlsl/python.cmake AND Python3_EXECUTABLE)
  set(_mlsl_py_args ${Python3_EXECUTABLE} ${NODECOMM_PYTHON_INSTALL_DIR})
endif()
add_test(NAME mlsl_installed_consumer
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/packaging/mlsl_consumer_check.sh
                 ${PROJECT_BINARY_DIR}/test-install ${PROJECT_SOURCE_DIR} ${_mlsl_py_args})
set_tests_properties(mlsl_installed_consumer PROPERTIES
                     LABELS "integration;mlsl" TIMEOUT 300 SKIP_RETURN_CODE 77
                     RESOURCE_LOCK nodecomm_install FIXTURES_REQUIRED nodecomm_installed)
