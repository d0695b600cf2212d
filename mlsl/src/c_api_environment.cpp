// mlsl.h over mlsl.hpp, the objects that set up and account: Environment, Session,
// OperationRegInfo, Operation, Statistics. The checks each call makes before the C++ call are
// c_api_support.hpp's.
#include "c_api_support.hpp"
#include "mlsl.h"
#include "mlsl.hpp"

using nodecomm::mlsl::c_api::c_api_call;
using nodecomm::mlsl::c_api::c_api_cxx;
using nodecomm::mlsl::c_api::c_api_dtype_ok;
using nodecomm::mlsl::c_api::c_api_env;
using nodecomm::mlsl::c_api::c_api_get;
using nodecomm::mlsl::c_api::c_api_handle;
using nodecomm::mlsl::c_api::c_api_have;
using nodecomm::mlsl::c_api::c_api_in_range;
using nodecomm::mlsl::c_api::c_api_object;
using nodecomm::mlsl::c_api::c_api_optional;
using nodecomm::mlsl::c_api::c_api_raw;
using nodecomm::mlsl::c_api::c_api_request;
using nodecomm::mlsl::c_api::c_api_run;

extern "C" {

// ---- OperationRegInfo ----

int mlsl_operation_reg_info_set_name(mlsl_operation_reg_info reg_info, const char* name) {
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::SetName, name);
}

int mlsl_operation_reg_info_add_input(mlsl_operation_reg_info reg_info, size_t fm_count,
                                      size_t fm_size, mlsl_data_type dtype) {
  if (!c_api_dtype_ok(__func__, dtype)) return CMLSL_FAILURE;
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::AddInput, fm_count, fm_size,
                    c_api_cxx(dtype));
}

int mlsl_operation_reg_info_add_output(mlsl_operation_reg_info reg_info, size_t fm_count,
                                       size_t fm_size, mlsl_data_type dtype) {
  if (!c_api_dtype_ok(__func__, dtype)) return CMLSL_FAILURE;
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::AddOutput, fm_count, fm_size,
                    c_api_cxx(dtype));
}

int mlsl_operation_reg_info_add_parameter_set(mlsl_operation_reg_info reg_info, size_t kernel_count,
                                              size_t kernel_size, mlsl_data_type dtype,
                                              int dist_update) {
  return mlsl_operation_reg_info_add_parameter_set_with_compress(
      reg_info, kernel_count, kernel_size, dtype, dist_update, CT_NONE);
}

int mlsl_operation_reg_info_add_parameter_set_with_compress(mlsl_operation_reg_info reg_info,
                                                            size_t kernel_count, size_t kernel_size,
                                                            mlsl_data_type dtype, int dist_update,
                                                            mlsl_compression_type compress_type) {
  if (!c_api_dtype_ok(__func__, dtype) ||
      !c_api_in_range(__func__, "compression type", c_api_raw(compress_type), 2,
                      "CT_NONE, CT_QUANTIZATION")) {
    return CMLSL_FAILURE;
  }
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::AddParameterSet, kernel_count,
                    kernel_size, c_api_cxx(dtype), dist_update != 0,
                    static_cast<MLSL::CompressionType>(compress_type));
}

int mlsl_operation_reg_info_validate(mlsl_operation_reg_info reg_info, mlsl_distribution dist) {
  MLSL::Distribution* distribution = nullptr;
  if (!c_api_optional(__func__, dist, &distribution)) return CMLSL_FAILURE;
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::Validate, distribution);
}

// ---- Operation ----

int mlsl_operation_set_distribution(mlsl_operation op, mlsl_distribution dist) {
  // No optional here: an operation's distribution can only be set to a real one.
  MLSL::Distribution* distribution = c_api_object<MLSL::Distribution>(__func__, dist);
  if (distribution == nullptr) return CMLSL_FAILURE;
  return c_api_call(__func__, op, &MLSL::Operation::SetDistribution, distribution);
}

int mlsl_operation_get_distribution(mlsl_operation op, mlsl_distribution* dist) {
  return c_api_get(__func__, op, dist, "dist", &MLSL::Operation::GetDistribution);
}

int mlsl_operation_get_session(mlsl_operation op, mlsl_session* session) {
  return c_api_get(__func__, op, session, "session", &MLSL::Operation::GetSession);
}

int mlsl_operation_get_op_type(mlsl_operation op, mlsl_op_type* op_type) {
  return c_api_get(__func__, op, op_type, "op_type", &MLSL::Operation::GetOpType);
}

int mlsl_operation_set_prev(mlsl_operation op, mlsl_operation prev, size_t act_idx,
                            size_t prev_op_act_idx) {
  MLSL::Operation* peer = nullptr;
  if (!c_api_optional(__func__, prev, &peer)) return CMLSL_FAILURE;
  return c_api_call(__func__, op, &MLSL::Operation::SetPrev, peer, act_idx, prev_op_act_idx);
}

int mlsl_operation_set_next(mlsl_operation op, mlsl_operation next, size_t act_idx,
                            size_t next_op_act_idx) {
  MLSL::Operation* peer = nullptr;
  if (!c_api_optional(__func__, next, &peer)) return CMLSL_FAILURE;
  return c_api_call(__func__, op, &MLSL::Operation::SetNext, peer, act_idx, next_op_act_idx);
}

int mlsl_operation_get_name(mlsl_operation op, const char** name) {
  return c_api_get(__func__, op, name, "name", &MLSL::Operation::GetName);
}

int mlsl_operation_get_global_minibatch_size(mlsl_operation op, size_t* global_minibatch_size) {
  return c_api_get(__func__, op, global_minibatch_size, "global_minibatch_size",
                   &MLSL::Operation::GetGlobalMinibatchSize);
}

int mlsl_operation_get_local_minibatch_size(mlsl_operation op, size_t* local_minibatch_size) {
  return c_api_get(__func__, op, local_minibatch_size, "local_minibatch_size",
                   &MLSL::Operation::GetLocalMinibatchSize);
}

int mlsl_operation_get_global_minibatch_offset(mlsl_operation op, size_t* global_minibatch_offset) {
  return c_api_get(__func__, op, global_minibatch_offset, "global_minibatch_offset",
                   &MLSL::Operation::GetGlobalMinibatchOffset);
}

int mlsl_operation_get_input_count(mlsl_operation op, size_t* input_count) {
  return c_api_get(__func__, op, input_count, "input_count", &MLSL::Operation::GetInputCount);
}

int mlsl_operation_get_input(mlsl_operation op, size_t input_idx, mlsl_activation* input_act) {
  return c_api_get(__func__, op, input_act, "input_act", &MLSL::Operation::GetInput, input_idx);
}

int mlsl_operation_get_output_count(mlsl_operation op, size_t* output_count) {
  return c_api_get(__func__, op, output_count, "output_count", &MLSL::Operation::GetOutputCount);
}

int mlsl_operation_get_output(mlsl_operation op, size_t output_idx, mlsl_activation* output_act) {
  return c_api_get(__func__, op, output_act, "output_act", &MLSL::Operation::GetOutput, output_idx);
}

int mlsl_operation_has_parameter_sets(mlsl_operation op, int* has_params) {
  return c_api_get(__func__, op, has_params, "has_params", &MLSL::Operation::HasParameterSets);
}

int mlsl_operation_get_parameter_set_count(mlsl_operation op, size_t* param_count) {
  return c_api_get(__func__, op, param_count, "param_count",
                   &MLSL::Operation::GetParameterSetCount);
}

int mlsl_operation_get_parameter_set(mlsl_operation op, size_t param_idx,
                                     mlsl_parameter_set* param_set) {
  return c_api_get(__func__, op, param_set, "param_set", &MLSL::Operation::GetParameterSet,
                   param_idx);
}

// ---- Statistics ----

int mlsl_statistics_start(mlsl_statistics stat) {
  return c_api_call(__func__, stat, &MLSL::Statistics::Start);
}

int mlsl_statistics_stop(mlsl_statistics stat) {
  return c_api_call(__func__, stat, &MLSL::Statistics::Stop);
}

int mlsl_statistics_reset(mlsl_statistics stat) {
  return c_api_call(__func__, stat, &MLSL::Statistics::Reset);
}

int mlsl_statistics_print(mlsl_statistics stat) {
  return c_api_call(__func__, stat, &MLSL::Statistics::Print);
}

int mlsl_statistics_is_started(mlsl_statistics stat, int* is_started) {
  return c_api_get(__func__, stat, is_started, "is_started", &MLSL::Statistics::IsStarted);
}

int mlsl_statistics_is_enabled(mlsl_statistics stat, int* is_enabled) {
  return c_api_get(__func__, stat, is_enabled, "is_enabled", &MLSL::Statistics::IsEnabled);
}

int mlsl_statistics_get_isolation_comm_cycles(mlsl_statistics stat, size_t op_idx,
                                              unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetIsolationCommCycles,
                   op_idx);
}

int mlsl_statistics_get_comm_size(mlsl_statistics stat, size_t op_idx, size_t* size) {
  return c_api_get(__func__, stat, size, "size", &MLSL::Statistics::GetCommSize, op_idx);
}

int mlsl_statistics_get_comm_cycles(mlsl_statistics stat, size_t op_idx,
                                    unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetCommCycles, op_idx);
}

int mlsl_statistics_get_compute_cycles(mlsl_statistics stat, size_t op_idx,
                                       unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetComputeCycles, op_idx);
}

int mlsl_statistics_get_total_isolation_comm_cycles(mlsl_statistics stat,
                                                    unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles",
                   &MLSL::Statistics::GetTotalIsolationCommCycles);
}

int mlsl_statistics_get_total_comm_size(mlsl_statistics stat, size_t* size) {
  return c_api_get(__func__, stat, size, "size", &MLSL::Statistics::GetTotalCommSize);
}

int mlsl_statistics_get_total_comm_cycles(mlsl_statistics stat, unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetTotalCommCycles);
}

int mlsl_statistics_get_total_compute_cycles(mlsl_statistics stat, unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetTotalComputeCycles);
}

// ---- Session ----

int mlsl_session_set_global_minibatch_size(mlsl_session session, size_t global_minibatch_size) {
  return c_api_call(__func__, session, &MLSL::Session::SetGlobalMinibatchSize,
                    global_minibatch_size);
}

int mlsl_session_get_global_minibatch_size(mlsl_session session, size_t* global_minibatch_size) {
  return c_api_get(__func__, session, global_minibatch_size, "global_minibatch_size",
                   &MLSL::Session::GetGlobalMinibatchSize);
}

int mlsl_session_get_phase_type(mlsl_session session, mlsl_phase_type* phase_type) {
  return c_api_get(__func__, session, phase_type, "phase_type", &MLSL::Session::GetPhaseType);
}

int mlsl_session_create_operation_reg_info(mlsl_session session, mlsl_op_type op_type,
                                           mlsl_operation_reg_info* reg_info) {
  if (!c_api_in_range(__func__, "operation type", c_api_raw(op_type), 10, "OT_CC .. OT_EVAL")) {
    return CMLSL_FAILURE;
  }
  return c_api_get(__func__, session, reg_info, "reg_info", &MLSL::Session::CreateOperationRegInfo,
                   static_cast<MLSL::OpType>(op_type));
}

int mlsl_session_delete_operation_reg_info(mlsl_session session, mlsl_operation_reg_info reg_info) {
  MLSL::OperationRegInfo* info = c_api_object<MLSL::OperationRegInfo>(__func__, reg_info);
  if (info == nullptr) return CMLSL_FAILURE;
  return c_api_call(__func__, session, &MLSL::Session::DeleteOperationRegInfo, info);
}

int mlsl_session_add_operation_with_distribution(mlsl_session session,
                                                 mlsl_operation_reg_info reg_info,
                                                 mlsl_distribution dist, size_t* op_idx) {
  MLSL::OperationRegInfo* info = c_api_object<MLSL::OperationRegInfo>(__func__, reg_info);
  MLSL::Distribution* distribution = nullptr;
  if (info == nullptr || !c_api_optional(__func__, dist, &distribution)) return CMLSL_FAILURE;
  return c_api_get(__func__, session, op_idx, "op_idx", &MLSL::Session::AddOperation, info,
                   distribution);
}

int mlsl_session_add_operation(mlsl_session session, mlsl_operation_reg_info reg_info,
                               size_t* op_idx) {
  return mlsl_session_add_operation_with_distribution(session, reg_info, 0, op_idx);
}

int mlsl_session_remove_operations(mlsl_session session) {
  return c_api_call(__func__, session, &MLSL::Session::RemoveOperations);
}

int mlsl_session_get_operation_count(mlsl_session session, size_t* op_count) {
  return c_api_get(__func__, session, op_count, "op_count", &MLSL::Session::GetOperationCount);
}

int mlsl_session_get_operation(mlsl_session session, size_t op_idx, mlsl_operation* op) {
  return c_api_get(__func__, session, op, "op", &MLSL::Session::GetOperation, op_idx);
}

int mlsl_session_commit(mlsl_session session) {
  return c_api_call(__func__, session, &MLSL::Session::Commit);
}

int mlsl_session_get_stats(mlsl_session session, mlsl_statistics* stat) {
  return c_api_get(__func__, session, stat, "stat", &MLSL::Session::GetStats);
}

// ---- Environment ----

int mlsl_environment_get_env(mlsl_environment* env) {
  if (!c_api_have(__func__, env, "env")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { *env = c_api_handle(&MLSL::Environment::GetEnv()); });
}

int mlsl_environment_get_version(int* version) {
  if (!c_api_have(__func__, version, "version")) return CMLSL_FAILURE;
  *version = MLSL::Environment::GetVersion();
  return CMLSL_SUCCESS;
}

int mlsl_environment_configure(mlsl_environment env, const char* config) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Configure(config); });
}

int mlsl_environment_init(mlsl_environment env, int* argc, char** argv[]) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Init(argc, argv); });
}

int mlsl_environment_finalize(mlsl_environment env) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Finalize(); });
}

int mlsl_environment_is_initialized(mlsl_environment env, int* is_initialized) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, is_initialized, "is_initialized")) {
    return CMLSL_FAILURE;
  }
  return c_api_run(__func__, [&] { *is_initialized = e->IsInitialized() ? 1 : 0; });
}

int mlsl_environment_get_process_idx(mlsl_environment env, size_t* process_idx) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, process_idx, "process_idx")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { *process_idx = e->GetProcessIdx(); });
}

int mlsl_environment_get_process_count(mlsl_environment env, size_t* process_count) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, process_count, "process_count")) {
    return CMLSL_FAILURE;
  }
  return c_api_run(__func__, [&] { *process_count = e->GetProcessCount(); });
}

int mlsl_environment_create_session(mlsl_environment env, mlsl_phase_type phase_type,
                                    mlsl_session* session) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, session, "session") ||
      !c_api_in_range(__func__, "phase type", c_api_raw(phase_type), 2, "PT_TRAIN, PT_TEST")) {
    return CMLSL_FAILURE;
  }
  return c_api_run(__func__, [&] {
    *session = c_api_handle(e->CreateSession(static_cast<MLSL::PhaseType>(phase_type)));
  });
}

int mlsl_environment_delete_session(mlsl_environment env, mlsl_session session) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  MLSL::Session* object = c_api_object<MLSL::Session>(__func__, session);
  if (object == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->DeleteSession(object); });
}

int mlsl_environment_create_distribution(mlsl_environment env, size_t data_partitions,
                                         size_t model_partitions, mlsl_distribution* dist) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, dist, "dist")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] {
    *dist = c_api_handle(e->CreateDistribution(data_partitions, model_partitions));
  });
}

int mlsl_environment_create_distribution_with_colors(mlsl_environment env, int data_color,
                                                     int model_color, mlsl_distribution* dist) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, dist, "dist")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] {
    *dist = c_api_handle(e->CreateDistributionWithColors(data_color, model_color));
  });
}

int mlsl_environment_delete_distribution(mlsl_environment env, mlsl_distribution dist) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  MLSL::Distribution* object = c_api_object<MLSL::Distribution>(__func__, dist);
  if (object == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->DeleteDistribution(object); });
}

int mlsl_environment_wait(mlsl_environment env, mlsl_comm_req req) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  MLSL::CommReq* token = c_api_request(__func__, req);
  if (token == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Wait(token); });
}

int mlsl_environment_test(mlsl_environment env, mlsl_comm_req req, int* is_completed) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  MLSL::CommReq* token = c_api_request(__func__, req);
  if (token == nullptr || !c_api_have(__func__, is_completed, "is_completed")) {
    return CMLSL_FAILURE;
  }
  return c_api_run(__func__, [&] {
    bool completed = false;
    e->Test(token, &completed);
    *is_completed = completed ? 1 : 0;
  });
}

int mlsl_environment_alloc(mlsl_environment env, size_t size, size_t alignment, void** ptr) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, ptr, "ptr")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { *ptr = e->Alloc(size, alignment); });
}

int mlsl_environment_free(mlsl_environment env, void* ptr) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Free(ptr); });
}

int mlsl_environment_set_quantization_params(mlsl_environment env, mlsl_quant_params* params) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, params, "params")) return CMLSL_FAILURE;
  // MLSL's callers pass the address of a QuantParams-shaped struct cast to this type (mlsl.h).
  return c_api_run(__func__,
                   [&] { e->SetQuantizationParams(reinterpret_cast<MLSL::QuantParams*>(params)); });
}

int mlsl_environment_get_quantization_params(mlsl_environment env, mlsl_quant_params* params) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, params, "params")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { *params = c_api_handle(e->GetQuantizationParams()); });
}

}  // extern "C"
