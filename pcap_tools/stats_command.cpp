#include "pcap_tools/stats_command.hpp"

#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "emulator/client/control_connection.hpp"

namespace uroce::pcap_tools {

namespace {

struct StatsOptions {
  std::string socket = emulator::client::ControlConnection::default_socket_path();
  bool json = false;
  bool nonzero = false;
};

// One "group.counter value" line per number, groups in the order the daemon sent them.
void print_text(const nlohmann::json& j, const std::string& prefix, bool nonzero) {
  for (const auto& [key, value] : j.items()) {
    const std::string name = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      print_text(value, name, nonzero);
    } else if (!nonzero || !value.is_number() || value.get<double>() != 0) {
      std::cout << name << " " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    }
  }
}

int run_stats(const StatsOptions& o) {
  try {
    auto connection = emulator::client::ControlConnection::connect(o.socket, "uroce stats");
    const nlohmann::json reply = connection->call({{"op", "stats"}});
    nlohmann::json counters = reply;
    counters.erase("id");
    counters.erase("ok");
    if (o.json) {
      std::cout << counters.dump() << "\n";
    } else {
      print_text(counters, "", o.nonzero);
    }
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
}

}  // namespace

void add_stats_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<StatsOptions>();
  CLI::App* cmd = app.add_subcommand("stats", "Show a running uroced's counters");
  cmd->add_option("--socket", options->socket, "uroced's control socket ($UROCE_SOCKET)")->capture_default_str();
  cmd->add_flag("--json", options->json, "One JSON object");
  cmd->add_flag("--nonzero", options->nonzero, "Only counters that are not zero");
  cmd->callback([options, &exit_code] { exit_code = run_stats(*options); });
}

}  // namespace uroce::pcap_tools
