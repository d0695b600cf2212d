/*
 * Proves that mlsl.h is C89: this file is built with -std=c89 -pedantic -Werror (see
 * c_python_checks.cmake). It declares one function so that the translation unit is not empty
 * and touches each kind of declaration the header makes.
 */
#include <mlsl.h>

int mlsl_h_c89_uses(mlsl_environment env, mlsl_data_type dtype, mlsl_group_type group);

int mlsl_h_c89_uses(mlsl_environment env, mlsl_data_type dtype, mlsl_group_type group) {
  int version = 0;
  mlsl_comm_req req = 0;
  if (mlsl_environment_get_version(&version) != CMLSL_SUCCESS) return CMLSL_FAILURE;
  if (CMLSL_VERSION_LT(version, CMLSL_VERSION(CMLSL_MAJOR_VERSION, CMLSL_MINOR_VERSION)))
    return CMLSL_FAILURE;
  (void)env;
  (void)req;
  return (int)dtype + (int)group + (int)OT_EVAL + (int)RT_MAX + (int)PT_TEST + (int)CT_QUANTIZATION;
}
