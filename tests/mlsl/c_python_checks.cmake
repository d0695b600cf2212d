# The MLSL layer through its C API (mlsl.h) and its Python module (docs/TESTING.md, "The MLSL
# layer"). Included from
# tests/mlsl/CMakeLists.txt, which sets MLSL_LAUNCH and MLSL_LAYOUTS.

# mlsl_c_check: a C99 program that links `mlsl` alone and includes only mlsl.h.
add_executable(mlsl_c_check mlsl_c_check.c mlsl_c_collectives.c mlsl_c_model.c)
set_target_properties(mlsl_c_check PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                                              C_EXTENSIONS OFF)
target_compile_options(mlsl_c_check PRIVATE -pedantic)
target_link_libraries(mlsl_c_check PRIVATE mlsl)

# mlsl.h is C89: one translation unit that includes it, built -std=c89 -pedantic -Werror on
# every build (an object library: nothing to run).
add_library(mlsl_h_c89 OBJECT mlsl_h_c89.c)
set_target_properties(mlsl_h_c89 PROPERTIES C_STANDARD 90 C_STANDARD_REQUIRED ON
                                            C_EXTENSIONS OFF)
target_compile_options(mlsl_h_c89 PRIVATE -pedantic -Werror)
target_link_libraries(mlsl_h_c89 PRIVATE mlsl)

# The Python checks run /usr/bin/python3 (Python3_EXECUTABLE, see python/CMakeLists.txt) with
# PYTHONPATH at the build tree's modules, and are skipped (77) when it lacks numpy.
set(MLSL_PY_LAUNCH bash ${PROJECT_SOURCE_DIR}/tests/python/with_modules.sh ${Python3_EXECUTABLE}
                   numpy ${CMAKE_BINARY_DIR}/python)

# Each launch runs in a directory of its own: Statistics::Print writes mlsl_stats.log into the
# working directory, and tests run in parallel.
set(MLSL_C_PY_WORK ${CMAKE_CURRENT_BINARY_DIR}/work)
foreach(layout ${MLSL_LAYOUTS})
  string(REPLACE "x" ";" nr ${layout})
  list(GET nr 0 nodes)
  list(GET nr 1 ranks)
  set(launch ${MLSL_LAUNCH} --nodes ${nodes} --ranks-per-node ${ranks} --)

  # Statistics are on (MLSL_STATS=1) for the C check on 4x1 and the Python check on 1x4: the
  # checks then assert what they count; elsewhere that every call is a successful no-op.
  set(c_env NODECOMM_TIMEOUT_SEC=120)
  set(py_env NODECOMM_TIMEOUT_SEC=120)
  if(layout STREQUAL "4x1")
    list(APPEND c_env MLSL_STATS=1)
  elseif(layout STREQUAL "1x4")
    list(APPEND py_env MLSL_STATS=1)
  endif()

  file(MAKE_DIRECTORY ${MLSL_C_PY_WORK}/mlsl_c_check_${layout})
  add_test(NAME mlsl_c_check_${layout}
           COMMAND ${CMAKE_COMMAND} -E env ${c_env} ${launch} $<TARGET_FILE:mlsl_c_check>
           WORKING_DIRECTORY ${MLSL_C_PY_WORK}/mlsl_c_check_${layout})
  set_tests_properties(mlsl_c_check_${layout} PROPERTIES LABELS "integration;mlsl" TIMEOUT 300)

  # On 2x2 the module initializes itself at import (MLSL_ALLOW_REINIT=1); elsewhere the script
  # calls init() first.
  set(py_args "")
  if(layout STREQUAL "2x2")
    set(py_args --import-init)
  endif()
  file(MAKE_DIRECTORY ${MLSL_C_PY_WORK}/mlsl_py_check_${layout})
  add_test(NAME mlsl_py_check_${layout}
           COMMAND ${MLSL_PY_LAUNCH} ${CMAKE_COMMAND} -E env ${py_env}
                   ${launch} ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/mlsl_py_check.py
                   ${py_args}
           WORKING_DIRECTORY ${MLSL_C_PY_WORK}/mlsl_py_check_${layout})
  set_tests_properties(mlsl_py_check_${layout} PROPERTIES LABELS "integration;mlsl" TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()
