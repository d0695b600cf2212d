// The C API's shared helpers (c_api_environment.cpp, c_api_exchange.cpp): mlsl.h over mlsl.hpp,
// every C function one call of the public C++ API.
//
// A C program hands in plain integers, so before a handle becomes a pointer it is checked
// against the implementation's registry of live objects (handles.hpp): a stale or invented
// handle, a NULL pointer where a result is to be stored and an enumerator out of range are
// refused with CMLSL_FAILURE and one line on stderr, before anything is started. What MLSL
// itself asserts on is left to the C++ API, which takes the fatal path (message, exit 1) in C
// as in C++ (docs/MLSL.md, "What differs").
//
// A named namespace, not an anonymous one: both files include this header, and the unity build
// puts them in one translation unit (tests/packaging/unity_names.py).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

#include "handles.hpp"
#include "mlsl.h"
#include "mlsl.hpp"

namespace nodecomm::mlsl::c_api {

// What each handle type of mlsl.h names, for the live check and for messages.
template <class T>
struct c_api_kind;
template <>
struct c_api_kind<MLSL::Session> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::session;
  static constexpr const char* noun = "session";
};
template <>
struct c_api_kind<MLSL::Distribution> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::distribution;
  static constexpr const char* noun = "distribution";
};
template <>
struct c_api_kind<MLSL::OperationRegInfo> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::reg_info;
  static constexpr const char* noun = "operation reg info";
};
template <>
struct c_api_kind<MLSL::Operation> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::operation;
  static constexpr const char* noun = "operation";
};
template <>
struct c_api_kind<MLSL::Activation> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::activation;
  static constexpr const char* noun = "activation";
};
template <>
struct c_api_kind<MLSL::CommBlockInfo> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::block;
  static constexpr const char* noun = "comm block info";
};
template <>
struct c_api_kind<MLSL::ParameterSet> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::parameter_set;
  static constexpr const char* noun = "parameter set";
};
template <>
struct c_api_kind<MLSL::Statistics> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::statistics;
  static constexpr const char* noun = "statistics";
};

inline void c_api_refuse(const char* function, const std::string& what) {
  std::fprintf(stderr, "mlsl: %s: %s\n", function, what.c_str());
}

inline std::string c_api_hex(unsigned long long value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", value);
  return text;
}

template <class T>
unsigned long long c_api_handle(T* object) {
  return static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(object));
}

// mlsl.h defines handles as integers, so turning one back into a pointer is the point.
template <class T>
T* c_api_pointer(unsigned long long handle) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(handle));
}

// The object `handle` names, or nullptr (reported) when it names no live T.
template <class T>
T* c_api_object(const char* function, unsigned long long handle) {
  T* object = c_api_pointer<T>(handle);
  if (handle == 0 || !nodecomm::mlsl::handle_is_live(c_api_kind<T>::kind, object)) {
    c_api_refuse(function, std::string(c_api_kind<T>::noun) + " handle " + c_api_hex(handle) +
                               " names no live " + c_api_kind<T>::noun);
    return nullptr;
  }
  return object;
}

// Like c_api_object, but handle 0 means "none" (a NULL pointer in the C++ call).
template <class T>
bool c_api_optional(const char* function, unsigned long long handle, T** object) {
  *object = nullptr;
  if (handle == 0) return true;
  *object = c_api_object<T>(function, handle);
  return *object != nullptr;
}

// The only environment is the singleton; its handle is its address.
inline MLSL::Environment* c_api_env(const char* function, mlsl_environment env) {
  MLSL::Environment* only = &MLSL::Environment::GetEnv();
  if (env != c_api_handle(only)) {
    c_api_refuse(function, "environment handle " + c_api_hex(env) +
                               " is not the one mlsl_environment_get_env returns (" +
                               c_api_hex(c_api_handle(only)) + ")");
    return nullptr;
  }
  return only;
}

inline bool c_api_have(const char* function, const void* pointer, const char* name) {
  if (pointer == nullptr) c_api_refuse(function, std::string(name) + " is NULL");
  return pointer != nullptr;
}

// C enums arrive as ints that may hold anything; the C++ API would take them at face value.
// Read through memcpy: in C++ even loading an enum object that holds a value outside its
// enumerators is undefined (UBSan's -fsanitize=enum stops on it).
template <class Enum>
int c_api_raw(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are passed as int");
  int raw = 0;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

inline bool c_api_in_range(const char* function, const char* what, int value, int count,
                           const char* names) {
  if (value >= 0 && value < count) return true;
  c_api_refuse(function,
               std::string(what) + " " + std::to_string(value) + " is not one of " + names);
  return false;
}

inline bool c_api_dtype_ok(const char* function, const mlsl_data_type& value) {
  return c_api_in_range(function, "data type", c_api_raw(value), 3, "DT_FLOAT, DT_DOUBLE, DT_BYTE");
}
inline bool c_api_group_ok(const char* function, const mlsl_group_type& value) {
  return c_api_in_range(function, "group type", c_api_raw(value), 3,
                        "GT_DATA, GT_MODEL, GT_GLOBAL");
}
inline bool c_api_reduction_ok(const char* function, const mlsl_reduction_type& value) {
  return c_api_in_range(function, "reduction type", c_api_raw(value), 3, "RT_SUM, RT_MIN, RT_MAX");
}

inline MLSL::DataType c_api_cxx(mlsl_data_type value) {
  return static_cast<MLSL::DataType>(value);
}
inline MLSL::GroupType c_api_cxx(mlsl_group_type value) {
  return static_cast<MLSL::GroupType>(value);
}
inline MLSL::ReductionType c_api_cxx(mlsl_reduction_type value) {
  return static_cast<MLSL::ReductionType>(value);
}

// A request handle is the CommReq* token itself; once Wait (or a completing Test) consumed it,
// it is refused here instead of reaching the C++ API's fatal "not found".
inline MLSL::CommReq* c_api_request(const char* function, mlsl_comm_req req) {
  MLSL::CommReq* token = c_api_pointer<MLSL::CommReq>(req);
  if (req == 0 || !nodecomm::mlsl::request_is_live(token)) {
    c_api_refuse(function, "request handle " + c_api_hex(req) +
                               " names no request in flight (already waited, tested to "
                               "completion, or not a request)");
    return nullptr;
  }
  return token;
}

// Runs the C++ call. Misuse never throws out of the C++ API (it exits), so what arrives here is
// unexpected (std::bad_alloc, say); it must still not unwind into a C caller.
template <class Body>
int c_api_run(const char* function, Body&& body) noexcept {
  try {
    body();
    return CMLSL_SUCCESS;
  } catch (const std::exception& error) {
    c_api_refuse(function, std::string("unexpected C++ exception: ") + error.what());
  } catch (...) {
    c_api_refuse(function, "unexpected C++ exception");
  }
  return CMLSL_FAILURE;
}

// A C++ result as mlsl.h stores it: objects as handles, bool as a whole int 0/1, enums by
// value (mlsl.h and mlsl.hpp number them alike).
template <class Out, class Result>
Out c_api_to_c(Result value) {
  if constexpr (std::is_pointer_v<Result> && std::is_same_v<Out, unsigned long long>) {
    return c_api_handle(value);
  } else {
    return static_cast<Out>(value);
  }
}

// The common shape: a live T, a non-NULL out-pointer, *out = (object.*getter)(args...).
template <class T, class Out, class Result, class... Params, class... Args>
int c_api_get(const char* function, unsigned long long handle, Out* out, const char* out_name,
              Result (T::*getter)(Params...), Args... args) {
  T* object = c_api_object<T>(function, handle);
  if (object == nullptr || !c_api_have(function, out, out_name)) return CMLSL_FAILURE;
  return c_api_run(function, [&] { *out = c_api_to_c<Out>((object->*getter)(args...)); });
}

// A live T, then (object.*method)(args...). A result is dropped: mlsl.h's add_input,
// add_output and add_parameter_set return only the status, as MLSL's do.
template <class T, class Result, class... Params, class... Args>
int c_api_call(const char* function, unsigned long long handle, Result (T::*method)(Params...),
               Args... args) {
  T* object = c_api_object<T>(function, handle);
  if (object == nullptr) return CMLSL_FAILURE;
  return c_api_run(function, [&] { (object->*method)(args...); });
}

// A Distribution collective: live distribution, req non-NULL, enums in range, then post.
template <class Post>
int c_api_collective(const char* function, mlsl_distribution dist, mlsl_comm_req* req,
                     const mlsl_data_type& dtype, const mlsl_group_type& group, Post post) {
  MLSL::Distribution* object = c_api_object<MLSL::Distribution>(function, dist);
  if (object == nullptr || !c_api_have(function, req, "req") || !c_api_dtype_ok(function, dtype) ||
      !c_api_group_ok(function, group)) {
    return CMLSL_FAILURE;
  }
  return c_api_run(function, [&] { *req = c_api_handle(post(*object)); });
}

}  // namespace nodecomm::mlsl::c_api
