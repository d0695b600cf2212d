// What the C API (c_api_*.cpp) asks the implementation before it turns a handle back into an
// object: a C program hands in plain integers, so a stale or made-up one must come back as
// CMLSL_FAILURE, not be dereferenced.
#pragma once

namespace nodecomm::mlsl {

enum class HandleKind {
  session,
  distribution,
  reg_info,
  operation,
  activation,
  block,
  parameter_set,
  statistics,
};

// True while `object` (the address the C++ API returned) is a live object of that kind.
bool handle_is_live(HandleKind kind, const void* object);

// True while `token` is a CommReq* a Distribution collective returned and no Wait or completing
// Test has consumed.
bool request_is_live(const void* token);

}  // namespace nodecomm::mlsl
