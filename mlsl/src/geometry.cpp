#include "geometry.hpp"

#include <stdexcept>
#include <string>

namespace nodecomm::mlsl {

GroupLayout grid_layout(int global, int world, int data_parts, int model_parts) {
  const auto where = [&] {
    return "distribution of " + std::to_string(world) + " processes into " +
           std::to_string(data_parts) + " data x " + std::to_string(model_parts) + " model parts";
  };
  if (data_parts < 1 || model_parts < 1) {
    throw std::invalid_argument(where() + ": both part counts must be at least 1");
  }
  const long long grid = static_cast<long long>(data_parts) * model_parts;
  if (world < 1 || world % grid != 0) {
    throw std::invalid_argument(where() + ": the process count must be a multiple of " +
                                std::to_string(grid));
  }
  if (global < 0 || global >= world) {
    throw std::invalid_argument(where() + ": process " + std::to_string(global) + " is not in 0.." +
                                std::to_string(world - 1));
  }
  const int cell = data_parts * model_parts;
  const int in_replica = global % cell;
  GroupLayout layout;
  layout.replica = global / cell;
  layout.model_color = layout.replica * cell + in_replica / model_parts;
  layout.model_index = in_replica % model_parts;
  layout.model_size = model_parts;
  layout.data_color = layout.replica * cell + in_replica % model_parts;
  layout.data_index = in_replica / model_parts;
  layout.data_size = data_parts;
  return layout;
}

MinibatchSlice minibatch_slice(size_t global, int data_size, int data_index) {
  MinibatchSlice slice;
  slice.local = global / static_cast<size_t>(data_size);
  slice.offset = slice.local * static_cast<size_t>(data_index);
  return slice;
}

ParameterPartition parameter_partition(size_t kernels, int model_size, int model_index,
                                       int data_size, int data_index, bool distributed_update) {
  ParameterPartition p;
  p.local = kernels / static_cast<size_t>(model_size);
  p.global_offset = p.local * static_cast<size_t>(model_index);
  p.owned = p.local;
  p.exchange = data_size > 1;
  if (distributed_update) {
    const auto d = static_cast<size_t>(data_size);
    p.owned = (p.local + d - 1) / d;
    p.local = p.owned * d;
    p.owned_offset = p.owned * static_cast<size_t>(data_index);
  }
  return p;
}

}  // namespace nodecomm::mlsl
