# The MLSL layer through its C++ API (docs/TESTING.md "The MLSL layer"). Included from
# tests/mlsl/CMakeLists.txt, which sets MLSL_LAUNCH and MLSL_LAYOUTS. Every program links
# `mlsl` alone, as an MLSL program would, and includes nothing but mlsl.hpp (and reference.hpp).
add_executable(mlsl_api_check mlsl_api_check.cpp mlsl_api_collectives.cpp)
add_executable(mlsl_model_check mlsl_model_check.cpp mlsl_model_net.cpp mlsl_model_tiles.cpp
                                mlsl_model_pairs.cpp mlsl_model_quant.cpp)
# The example is C++98 on purpose: MLSL's programs may be built with -std=c++98, and building it
# so proves that mlsl.hpp still is.
add_executable(mlsl_train ${PROJECT_SOURCE_DIR}/examples/mlsl/mlsl_train.cpp)
set_target_properties(mlsl_train PROPERTIES CXX_STANDARD 98 CXX_STANDARD_REQUIRED ON
                                            CXX_EXTENSIONS OFF)
target_compile_options(mlsl_train PRIVATE -pedantic)
foreach(prog mlsl_api_check mlsl_model_check mlsl_train)
  target_link_libraries(${prog} PRIVATE mlsl)
endforeach()

# Each launch runs in a directory of its own: Statistics::Print writes mlsl_stats.log into the
# working directory, and tests run in parallel.
set(MLSL_WORK ${CMAKE_CURRENT_BINARY_DIR}/work)

function(mlsl_add_launch name layout)
  string(REPLACE "x" ";" nr ${layout})
  list(GET nr 0 nodes)
  list(GET nr 1 ranks)
  file(MAKE_DIRECTORY ${MLSL_WORK}/${name})
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -E env ${MLSL_LAUNCH_ENV}
                   ${MLSL_LAUNCH} --nodes ${nodes} --ranks-per-node ${ranks} --
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/${ARGN}
           WORKING_DIRECTORY ${MLSL_WORK}/${name})
  set_tests_properties(${name} PROPERTIES LABELS "integration;mlsl" TIMEOUT 300)
endfunction()

foreach(layout ${MLSL_LAYOUTS})
  set(MLSL_LAUNCH_ENV NODECOMM_TIMEOUT_SEC=120)
  mlsl_add_launch(mlsl_api_${layout} ${layout} mlsl_api_check)
  # Statistics are on (MLSL_STATS=1): the check asserts what they report.
  set(MLSL_LAUNCH_ENV NODECOMM_TIMEOUT_SEC=120 MLSL_STATS=1)
  mlsl_add_launch(mlsl_model_${layout} ${layout} mlsl_model_check)
endforeach()
# Not in the CI's ASan/UBSan stage (its build time): run them sanitized by hand, as
# docs/TESTING.md shows, when the layer changes.

# Configure("color=...") splitting the global group after Init.
set(MLSL_LAUNCH_ENV NODECOMM_TIMEOUT_SEC=120)
mlsl_add_launch(mlsl_api_configure_2x2 2x2 mlsl_api_check --mode configure)

# CT_QUANTIZATION: bf16 and int8 wire compression of a gradient allreduce between nodes, within
# the documented bounds (exact on one node).
set(MLSL_LAUNCH_ENV NODECOMM_TIMEOUT_SEC=120 NODECOMM_MLSL_QUANT=bf16)
mlsl_add_launch(mlsl_model_quant_bf16_2x2 2x2 mlsl_model_check --mode quant)
mlsl_add_launch(mlsl_model_quant_bf16_1x4 1x4 mlsl_model_check --mode quant)
set(MLSL_LAUNCH_ENV NODECOMM_TIMEOUT_SEC=120 NODECOMM_MLSL_QUANT=int8)
mlsl_add_launch(mlsl_model_quant_int8_4x1 4x1 mlsl_model_check --mode quant)

# The example program on every layout x model parts {1, 2, 4} x distributed update x user
# buffers, and once with TestGradientComm loops: `mlsl_train all` runs them in turn in one
# launch per layout (a launch costs more than a run). One launch with explicit arguments too.
set(MLSL_LAUNCH_ENV NODECOMM_TIMEOUT_SEC=120)
foreach(layout ${MLSL_LAYOUTS})
  mlsl_add_launch(mlsl_train_${layout} ${layout} mlsl_train all)
endforeach()
mlsl_add_launch(mlsl_train_2x2_m2_du1_ub1_test 2x2 mlsl_train 2 1 1 1)

# The MLSL variables: priorities (LIFO, FIFO), statistics, logging, ignored ones reported.
add_test(NAME mlsl_env_2x2
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mlsl_env_check.sh
                 ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${MLSL_WORK}/mlsl_env_2x2)
set_tests_properties(mlsl_env_2x2 PROPERTIES LABELS "integration;mlsl" TIMEOUT 300)

# Misuse ends the process with status 1 and a message, as in MLSL; a mismatch of collectives
# fails instead of hanging.
add_test(NAME mlsl_errors
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mlsl_errors.sh ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
set_tests_properties(mlsl_errors PROPERTIES LABELS "integration;mlsl" TIMEOUT 300)
