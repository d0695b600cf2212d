// The Python module nodecomm._torch_backend: the process group class, and the few context
// calls its creator needs (nodecomm/torch.py registers the backend and makes communicators).
#include <pybind11/chrono.h>
#include <torch/python.h>

#include <cstdint>
#include <string>

#include "completer.hpp"
#include "process_group.hpp"
#include "shared_memory.hpp"

namespace py = pybind11;
using nodecomm::torch_backend::Completer;
using nodecomm::torch_backend::GroupOptions;
using nodecomm::torch_backend::ProcessGroupNodecomm;

namespace {

// The nc_context_t* that Python's ctypes package holds (an integer address): one attach per
// process, shared by the hook, the array API and this backend.
nc_context_t* context_of(uintptr_t handle) {
  TORCH_CHECK(handle != 0, "nodecomm: not initialized (call nodecomm.init() first)");
  // An address is what ctypes hands over; nothing else can carry the pointer.
  return reinterpret_cast<nc_context_t*>(handle);  // NOLINT(performance-no-int-to-ptr)
}

nc_compress_t parse_compress(const std::string& name) {
  if (name.empty() || name == "none") return NC_COMPRESS_NONE;
  nc_compress_t c = NC_COMPRESS_NONE;
  TORCH_CHECK(nc_compress_parse(name.c_str(), &c) == NC_OK, "nodecomm: unknown compression '", name,
              "' (none, bf16, f16)");
  // int8 keeps an error-feedback residual per tensor name; the backend cannot tell DDP's
  // buckets apart, so the hook (which names each bucket) is the way to use it.
  TORCH_CHECK(c != NC_COMPRESS_INT8,
              "nodecomm: int8 compression needs a name per tensor; "
              "use nodecomm.torch.allreduce_hook with HookState(compress='int8')");
  return c;
}

nc_comm_t comm_split(uintptr_t handle, nc_comm_t parent, int color, int key) {
  nc_comm_t out = NC_COMM_NULL;
  const nc_status_t status = nc_comm_split(context_of(handle), parent, color, key, &out);
  TORCH_CHECK(status == NC_OK, "nodecomm: comm_split: ", nc_status_string(status), ": ",
              nc_last_error());
  return out;
}

nc_comm_t comm_dup(uintptr_t handle, nc_comm_t parent) {
  nc_comm_t out = NC_COMM_NULL;
  const nc_status_t status = nc_comm_dup(context_of(handle), parent, &out);
  TORCH_CHECK(status == NC_OK, "nodecomm: comm_dup: ", nc_status_string(status), ": ",
              nc_last_error());
  return out;
}

}  // namespace

PYBIND11_MODULE(_torch_backend, m) {
  m.doc() = "torch.distributed backend 'nodecomm' (see nodecomm.torch)";
  // Registers c10d::ProcessGroup, Store and Work with pybind11 before we derive from them.
  py::module_::import("torch.distributed");

  py::class_<ProcessGroupNodecomm, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupNodecomm>>(
      m, "ProcessGroupNodecomm")
      .def(py::init([](uintptr_t handle, nc_comm_t comm, int rank, int size,
                       std::chrono::milliseconds timeout,
                       const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                       const std::string& compress, size_t piece_bytes, int32_t priority,
                       bool move_heap) {
             GroupOptions options;
             options.compress = parse_compress(compress);
             options.piece_bytes = piece_bytes;
             options.priority = priority;
             options.move_heap = move_heap;
             return c10::make_intrusive<ProcessGroupNodecomm>(context_of(handle), comm, rank, size,
                                                              timeout, store, name, options);
           }),
           py::arg("context"), py::arg("comm"), py::arg("rank"), py::arg("size"),
           py::arg("timeout"), py::arg("store"), py::arg("name"), py::arg("compress") = "",
           py::arg("piece_bytes") = size_t{4000000}, py::arg("priority") = 0,
           py::arg("move_heap") = true, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("comm", &ProcessGroupNodecomm::comm)
      .def_property_readonly("compress",
                             [](const ProcessGroupNodecomm& pg) {
                               return std::string(nc_compress_name(pg.options().compress));
                             })
      .def_property_readonly(
          "piece_bytes", [](const ProcessGroupNodecomm& pg) { return pg.options().piece_bytes; });

  m.def("_comm_split", &comm_split, py::arg("context"), py::arg("parent"), py::arg("color"),
        py::arg("key"), py::call_guard<py::gil_scoped_release>());
  m.def("_comm_dup", &comm_dup, py::arg("context"), py::arg("parent"),
        py::call_guard<py::gil_scoped_release>());
  m.def(
      "_shutdown",
      [] {
        Completer::instance().shutdown();
        nodecomm::torch_backend::SharedMemory::instance().forget_context();
      },
      "Fails what is in flight and stops the completion thread (before nc_finalize)",
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_in_flight", [] { return Completer::instance().in_flight(); },
      "Operations of this backend not yet retired");
  m.attr("UNDEFINED") = NC_UNDEFINED;
  m.attr("COMM_NULL") = NC_COMM_NULL;
}
