#include "service_state.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "nodecomm/ipc/runtime_paths.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "process.hpp"

namespace nodecomm::launch {
namespace {

constexpr int kStateVersion = 1;

nlohmann::json node_to_json(const ClusterNode& node) {
  return {{"node", node.index},
          {"instance", node.instance},
          {"runtime_dir", node.runtime_dir},
          {"log", node.log},
          {"argv", node.argv},
          {"pid", node.pid},
          {"start_time", node.start_time},
          {"netns", node.netns}};
}

ClusterNode node_from_json(const nlohmann::json& j) {
  ClusterNode node;
  node.index = j.at("node").get<int>();
  node.instance = j.at("instance").get<std::string>();
  node.runtime_dir = j.at("runtime_dir").get<std::string>();
  node.log = j.at("log").get<std::string>();
  node.argv = j.at("argv").get<std::vector<std::string>>();
  node.pid = j.at("pid").get<pid_t>();
  node.start_time = j.at("start_time").get<unsigned long long>();
  node.netns = j.at("netns").get<std::string>();
  return node;
}

nlohmann::json state_to_json(const ClusterState& state) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& node : state.node_list) nodes.push_back(node_to_json(node));
  return {{"version", kStateVersion},
          {"cluster", state.name},
          {"dir", state.dir},
          {"uid", state.uid},
          {"nodes", state.nodes},
          {"daemon", state.daemon},
          {"rendezvous", state.rendezvous},
          {"ompi_server",
           {{"argv", state.server_argv},
            {"pid", state.server_pid},
            {"start_time", state.server_start_time},
            {"log", state.server_log}}},
          {"netsim", {{"rate", state.link_rate}, {"namespaces", state.namespaces}}},
          {"node_list", nodes}};
}

ClusterState state_from_json(const nlohmann::json& j) {
  if (j.at("version").get<int>() != kStateVersion) {
    throw std::runtime_error(fmt::format("state version {} (this launcher reads version {})",
                                         j.at("version").dump(), kStateVersion));
  }
  ClusterState state;
  state.name = j.at("cluster").get<std::string>();
  state.dir = j.at("dir").get<std::string>();
  state.uid = j.at("uid").get<uid_t>();
  state.nodes = j.at("nodes").get<int>();
  state.daemon = j.at("daemon").get<std::string>();
  state.rendezvous = j.at("rendezvous").get<std::string>();
  const auto& server = j.at("ompi_server");
  state.server_argv = server.at("argv").get<std::vector<std::string>>();
  state.server_pid = server.at("pid").get<pid_t>();
  state.server_start_time = server.at("start_time").get<unsigned long long>();
  state.server_log = server.at("log").get<std::string>();
  state.link_rate = j.at("netsim").at("rate").get<std::string>();
  state.namespaces = j.at("netsim").at("namespaces").get<std::vector<std::string>>();
  for (const auto& node : j.at("node_list")) state.node_list.push_back(node_from_json(node));
  return state;
}

}  // namespace

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file_atomic(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "create " + tmp);
  ipc::Fd file(fd);
  if (::fchmod(fd, mode) != 0) {
    throw std::system_error(errno, std::generic_category(), "chmod " + tmp);
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::system_error(errno, std::generic_category(), "write " + tmp);
    done += static_cast<size_t>(n);
  }
  file.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::system_error(errno, std::generic_category(), "rename " + tmp);
  }
}

std::string cluster_dir(const std::string& name) {
  return kClusterDirPrefix + name;
}

ClusterState load_cluster(const std::string& name) {
  const std::string dir = cluster_dir(name);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      throw std::runtime_error(fmt::format(
          "no simulated cluster '{}' is up (no {}; start one with --service up --cluster {} "
          "--nodes N)",
          name, dir, name));
    }
    throw std::system_error(errno, std::generic_category(), "stat " + dir);
  }
  if (!S_ISDIR(st.st_mode) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw std::runtime_error(fmt::format(
        "{} is not a cluster's state directory (a directory writable only by its owner)", dir));
  }
  const std::string path = dir + "/" + kStateFile;
  const std::string text = read_text_file(path);
  if (text.empty()) {
    throw std::runtime_error(fmt::format(
        "cluster '{}' has no state file {} (it is being brought up, or that failed half-way; "
        "--service down --cluster {} removes what is left)",
        name, path, name));
  }
  ClusterState state;
  try {
    state = state_from_json(nlohmann::json::parse(text));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("state file {}: {}", path, e.what()));
  }
  if (state.uid != st.st_uid || state.dir != dir || state.name != name ||
      state.node_list.size() != static_cast<size_t>(state.nodes)) {
    throw std::runtime_error(
        fmt::format("state file {} does not describe cluster '{}' of uid {} (the owner of {})",
                    path, name, st.st_uid, dir));
  }
  return state;
}

bool cluster_node_ready(const ClusterNode& node) {
  if (node.pid <= 0 || !process_alive(ProcessRef{node.pid, node.start_time})) return false;
  const std::string text = read_text_file(ipc::ready_path(node.runtime_dir));
  if (text.empty()) return false;
  try {
    const auto ready = nlohmann::json::parse(text);
    return ready.at("pid").get<long long>() == node.pid &&
           ready.at("instance").get<std::string>() == node.instance;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

void save_cluster_state(const ClusterState& state, const std::string& dir) {
  write_file_atomic(dir + "/" + kStateFile, state_to_json(state).dump(2) + "\n", 0644);
}

}  // namespace nodecomm::launch
