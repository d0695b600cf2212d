// Where nodecommd's settings (config/config.hpp) come from, in rising precedence: their
// defaults, the configuration file, the environment and the flags. Only the program parses
// them; every layer below reads the plain structs.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.hpp"

namespace nodecomm::daemon {

// The configuration file read when neither --config nor NODECOMMD_CONFIG names one.
extern const char* const kDefaultConfigFile;

// The environment variable that sets flag `name` ("chunk-size" -> "NODECOMM_CHUNK_SIZE";
// "idle" -> "NODECOMMD_IDLE", because NODECOMM_IDLE is the client library's).
std::string env_name_for(const std::string& name);

// Parses the configuration file, the environment and argv. On --help prints usage and exits
// 0; on --print-config prints every effective setting and where it came from and exits 0; on
// a bad flag, setting or variable prints one line to stderr and exits 2.
DaemonConfig parse_config(int argc, char** argv);

// Replaces each "{node}" in `text` with `node`.
std::string expand_node(std::string text, uint32_t node);

}  // namespace nodecomm::daemon
