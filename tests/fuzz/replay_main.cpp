// Runs a fuzz target over files without libFuzzer, so that the main (g++) build replays the
// checked-in seed corpora, and any crash reproducer, as an ordinary test:
//   fuzz_decoder_replay tests/fuzz/corpus [more files or directories...]
//   fuzz_session_replay tests/fuzz/corpus-session
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz_replay: cannot read %s\n", path.c_str());
    return false;
  }
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in),
                                   std::istreambuf_iterator<char>()};
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_<target>_replay FILE|DIR...\n");
    return 2;
  }
  size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (!entry.is_regular_file()) continue;
        if (!run_file(entry.path())) return 1;
        ++inputs;
      }
    } else {
      if (!run_file(arg)) return 1;
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "fuzz_replay: no inputs found\n");
    return 1;
  }
  std::printf("fuzz_replay: %zu inputs decoded, every oracle held\n", inputs);
  return 0;
}
