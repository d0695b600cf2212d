# The Python module `mlsl` (ctypes over mlsl.h, like MLSL's own), built and installed beside
# nodecomm's package (cmake/NodecommPythonPackage.cmake). Included from mlsl/CMakeLists.txt,
# after python/ set NODECOMM_PYTHON_INSTALL_DIR.
include(${PROJECT_SOURCE_DIR}/cmake/NodecommPythonPackage.cmake)
nodecomm_python_package(mlsl ${CMAKE_CURRENT_SOURCE_DIR}/python/mlsl mlsl mlsl_python
                        __init__.py mlsl.py _native.py)
