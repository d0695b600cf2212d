// The built-in model profiles of --workload and the FILE format.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "workload.hpp"

namespace nodecomm::bench {
namespace {

// The daemon keeps 39 bytes of a tensor name (proto::kTensorNameBytes - 1); int8 compression
// keys its residuals by name, so names must stay distinct within that.
constexpr size_t kMaxNameBytes = 39;

class Builder {
 public:
  // Forward order; reversed into backprop order by take().
  void add(std::string name, uint64_t elements, double weight) {
    forward_.push_back({std::move(name), elements, weight, -1});
  }
  void conv(const std::string& name, uint64_t in, uint64_t out, uint64_t k, uint64_t pixels) {
    const uint64_t elements = in * out * k * k;
    add(name + ".weight", elements, static_cast<double>(elements * pixels));
  }
  void batch_norm(const std::string& name, uint64_t channels, uint64_t pixels) {
    add(name + ".weight", channels, static_cast<double>(channels * pixels));
    add(name + ".bias", channels, static_cast<double>(channels * pixels));
  }
  std::vector<Tensor> take() {
    std::reverse(forward_.begin(), forward_.end());
    return std::move(forward_);
  }

 private:
  std::vector<Tensor> forward_;
};

}  // namespace

Profile resnet50_profile() {
  // torchvision.models.resnet50 (v1.5: the stride sits on each bottleneck's 3x3 conv), its
  // parameters in model.parameters() order; autograd produces them in about the reverse.
  Builder b;
  b.conv("conv1", 3, 64, 7, 112 * 112);
  b.batch_norm("bn1", 64, 112 * 112);
  struct Stage {
    uint64_t planes;
    int blocks;
    uint64_t stride;
  };
  const Stage stages[] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
  uint64_t inplanes = 64;
  uint64_t side = 56;  // after the max pool
  for (int s = 0; s < 4; ++s) {
    const Stage& st = stages[s];
    for (int k = 0; k < st.blocks; ++k) {
      const std::string block = fmt::format("layer{}.{}", s + 1, k);
      const uint64_t out_side = k == 0 ? side / st.stride : side;
      const uint64_t in_pixels = side * side;
      const uint64_t out_pixels = out_side * out_side;
      const uint64_t width = st.planes * 4;
      b.conv(block + ".conv1", inplanes, st.planes, 1, in_pixels);
      b.batch_norm(block + ".bn1", st.planes, in_pixels);
      b.conv(block + ".conv2", st.planes, st.planes, 3, out_pixels);
      b.batch_norm(block + ".bn2", st.planes, out_pixels);
      b.conv(block + ".conv3", st.planes, width, 1, out_pixels);
      b.batch_norm(block + ".bn3", width, out_pixels);
      if (k == 0) {
        b.conv(block + ".downsample.0", inplanes, width, 1, out_pixels);
        b.batch_norm(block + ".downsample.1", width, out_pixels);
      }
      inplanes = width;
      side = out_side;
    }
  }
  b.add("fc.weight", 2048 * 1000, 2048 * 1000);
  b.add("fc.bias", 1000, 1000);
  return {"resnet50", "parameters x output pixels at 224x224; batch norm: channels x pixels",
          b.take(), false};
}

Profile bert_large_profile() {
  // BERT-large (24 layers, hidden 1024, FFN 4096, 16 heads, vocabulary 30522, 512 positions)
  // with the MLM and NSP heads, named as in Hugging Face's BertForPreTraining without the
  // "bert." prefix (names must fit 39 bytes). One tensor per module (weight and bias
  // together) and Q, K, V fused, as Megatron-style implementations keep them: 153 tensors.
  constexpr uint64_t kHidden = 1024;
  constexpr uint64_t kFfn = 4096;
  constexpr uint64_t kVocab = 30522;
  constexpr uint64_t kTokens = 128;  // sequence length of the MACs below
  Builder b;
  const auto linear = [&](const std::string& name, uint64_t in, uint64_t out, uint64_t tokens,
                          double extra = 0) {
    b.add(name, in * out + out, static_cast<double>(in * out * tokens) + extra);
  };
  const auto layer_norm = [&](const std::string& name) {
    b.add(name, 2 * kHidden, static_cast<double>(2 * kHidden * kTokens));
  };
  // Embedding gradients are a scatter-add of one row per token.
  b.add("embeddings.word_embeddings", kVocab * kHidden, kHidden * kTokens);
  b.add("embeddings.position_embeddings", 512 * kHidden, kHidden * kTokens);
  b.add("embeddings.token_type_embeddings", 2 * kHidden, kHidden * kTokens);
  layer_norm("embeddings.LayerNorm");
  for (int l = 0; l < 24; ++l) {
    const std::string p = fmt::format("layer.{}.", l);
    // The attention scores (Q K^T and the weighted sum of V) have no parameters of their own:
    // their MACs go with the fused projection.
    linear(p + "attention.self.qkv", kHidden, 3 * kHidden, kTokens,
           2.0 * kTokens * kTokens * kHidden);
    linear(p + "attention.output.dense", kHidden, kHidden, kTokens);
    layer_norm(p + "attention.output.LayerNorm");
    linear(p + "intermediate.dense", kHidden, kFfn, kTokens);
    linear(p + "output.dense", kFfn, kHidden, kTokens);
    layer_norm(p + "output.LayerNorm");
  }
  linear("pooler.dense", kHidden, kHidden, 1);  // the [CLS] token only
  linear("cls.predictions.transform.dense", kHidden, kHidden, kTokens);
  layer_norm("cls.predictions.transform.LayerNorm");
  // The decoder's weight is the word embeddings' (its gradient lands there, posted last);
  // the decoder bias carries the vocabulary projection's MACs, the first of the backward pass.
  b.add("cls.predictions.decoder.bias", kVocab, static_cast<double>(kHidden * kVocab * kTokens));
  linear("cls.seq_relationship", kHidden, 2, 1);
  return {"bert-large", "MACs per 128-token sequence; embeddings: one row per token", b.take(),
          false};
}

Profile load_profile(const std::string& spec) {
  if (spec == "resnet50") return resnet50_profile();
  if (spec == "bert-large") return bert_large_profile();
  std::ifstream in(spec);
  if (!in) {
    throw std::runtime_error(fmt::format("{}: not resnet50, bert-large or a readable file ({})",
                                         spec, std::strerror(errno)));
  }
  Profile p;
  p.name = spec;
  p.weight_rule = "elements (floor 1% of the mean)";
  std::string line;
  int number = 0;
  size_t with_times = 0;
  std::set<std::string> names;
  while (std::getline(in, line)) {
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string name, elements, time, extra;
    if (!(fields >> name)) continue;  // blank or comment
    const auto bad = [&](const std::string& why) {
      return std::runtime_error(
          fmt::format("{}: line {}: {} (expected `name elements "
                      "[compute_us]`)",
                      spec, number, why));
    };
    if (!(fields >> elements)) throw bad("no element count");
    Tensor t;
    t.name = name;
    const char* end = elements.data() + elements.size();
    if (auto [ptr, ec] = std::from_chars(elements.data(), end, t.elements);
        ec != std::errc() || ptr != end || t.elements == 0 || t.elements > (1ull << 36)) {
      throw bad(fmt::format("'{}' is not an element count in [1, 2^36]", elements));
    }
    if (fields >> time) {
      const char* tend = time.data() + time.size();
      auto [ptr, ec] = std::from_chars(time.data(), tend, t.compute_us);
      if (ec != std::errc() || ptr != tend || !(t.compute_us >= 0) || t.compute_us > 1e9) {
        throw bad(fmt::format("'{}' is not a compute time in microseconds", time));
      }
      ++with_times;
    }
    if (fields >> extra) throw bad(fmt::format("unexpected '{}'", extra));
    if (name.size() > kMaxNameBytes) {
      throw bad(fmt::format("name '{}' is longer than {} bytes", name, kMaxNameBytes));
    }
    if (!names.insert(name).second) throw bad(fmt::format("name '{}' appears twice", name));
    t.weight = static_cast<double>(t.elements);
    p.tensors.push_back(std::move(t));
  }
  if (in.bad()) throw std::runtime_error(fmt::format("{}: read error", spec));
  if (p.tensors.empty()) throw std::runtime_error(fmt::format("{}: no tensors", spec));
  if (with_times != 0 && with_times != p.tensors.size()) {
    throw std::runtime_error(
        fmt::format("{}: {} of {} lines give compute_us; give it on every line or on none", spec,
                    with_times, p.tensors.size()));
  }
  p.explicit_times = with_times != 0;
  if (p.explicit_times) {
    p.weight_rule = "compute_us as given";
    for (Tensor& t : p.tensors) t.weight = t.compute_us;
  } else {
    double mean = 0;
    for (const Tensor& t : p.tensors) mean += t.weight;
    mean /= static_cast<double>(p.tensors.size());
    for (Tensor& t : p.tensors) t.weight = std::max(t.weight, 0.01 * mean);
  }
  return p;
}

double default_compute_ms(const Profile& profile, double scale) {
  double elements = 0;
  for (const Tensor& t : profile.tensors) {
    elements += std::max(1.0, std::round(static_cast<double>(t.elements) * scale));
  }
  // 2(N-1)/N x bytes on N = 2 nodes is the bytes themselves, at 1 Gbit/s = 125e6 bytes/s.
  return std::round(elements * 4 / 125e6 * 1e4) / 10;  // ms, to 0.1 ms
}

std::vector<Layer> plan_layers(const Profile& profile, double scale, double compute_ms) {
  std::vector<Layer> layers;
  double weights = 0;
  for (const Tensor& t : profile.tensors) weights += t.weight;
  const bool as_given = profile.explicit_times && compute_ms < 0;
  const int n = static_cast<int>(profile.tensors.size());
  for (int i = 0; i < n; ++i) {
    const Tensor& t = profile.tensors[static_cast<size_t>(i)];
    Layer l;
    l.name = t.name;
    l.count =
        static_cast<size_t>(std::max(1.0, std::round(static_cast<double>(t.elements) * scale)));
    if (as_given) {
      l.compute_us = t.compute_us;
    } else {
      l.compute_us = weights > 0 ? std::max(compute_ms, 0.0) * 1e3 * t.weight / weights : 0;
    }
    l.priority = i;  // posted last = the network's first layer = the highest priority
    layers.push_back(std::move(l));
  }
  return layers;
}

uint64_t total_elements(const std::vector<Layer>& layers) {
  uint64_t n = 0;
  for (const Layer& l : layers) n += l.count;
  return n;
}

uint64_t workload_arena_bytes(const std::vector<Layer>& layers) {
  constexpr uint64_t kDefaultArena = 64ull << 20;
  uint64_t need = 2ull << 20;  // the sync word, timing scratch, slack
  for (const Layer& l : layers) {
    const uint64_t bytes = l.count * sizeof(float);
    // nc_alloc aligns to 4096 from 64 KiB up, else 64.
    const uint64_t align = bytes >= (64u << 10) ? 4096 : 64;
    need += 2 * ((bytes + align - 1) / align * align);
  }
  need = (need + 4095) / 4096 * 4096;
  return need > kDefaultArena ? need : 0;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace nodecomm::bench
