#include "pcap_tools/address_command.hpp"

#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "emulator/client/control_connection.hpp"

namespace uroce::pcap_tools {

namespace {

struct AddressOptions {
  std::string socket = emulator::client::ControlConnection::default_socket_path();
  std::string address;  // add, del
  bool json = false;    // show
};

nlohmann::json call(const AddressOptions& o, nlohmann::json request) {
  auto connection = emulator::client::ControlConnection::connect(o.socket, "uroce address");
  nlohmann::json reply = connection->call(request);
  reply.erase("id");
  reply.erase("ok");
  return reply;
}

// One line per address: "GID 0  10.0.0.1/24  ::ffff:10.0.0.1", "  (SLAAC)" after one autoconfiguration formed.
int show(const AddressOptions& o) {
  const nlohmann::json reply = call(o, {{"op", "port_addresses"}});
  if (o.json) {
    std::cout << reply.dump() << "\n";
    return 0;
  }
  for (const auto& a : reply.at("addresses")) {
    std::string text = a.at("address").get<std::string>();
    if (a.contains("prefix_length")) text += "/" + std::to_string(a.at("prefix_length").get<unsigned>());
    std::cout << "GID " << a.at("gid_index").get<unsigned>() << "  " << text << "  " << a.at("gid").get<std::string>()
              << (a.value("autoconf", false) ? "  (SLAAC)" : "") << "\n";
  }
  return 0;
}

int change(const AddressOptions& o, const std::string& op, const char* done) {
  const nlohmann::json reply = call(o, {{"op", op}, {"address", o.address}});
  std::cout << o.address << ": " << done << " GID " << reply.at("gid_index").get<unsigned>() << "\n";
  return 0;
}

// A refused change, or no daemon to ask, exits 1 with the reason.
template <class Fn>
int guarded(Fn fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

}  // namespace

void add_address_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<AddressOptions>();
  CLI::App* cmd = app.add_subcommand("address", "Show, add or remove a running uroced's port addresses (its GIDs)");
  cmd->add_option("--socket", o->socket, "uroced's control socket ($UROCE_SOCKET)")->capture_default_str();
  cmd->require_subcommand(0, 1);
  CLI::App* show_cmd = cmd->add_subcommand("show", "The addresses, by GID index (the default)");
  show_cmd->add_flag("--json", o->json, "One JSON object");
  CLI::App* add = cmd->add_subcommand("add", "Give the port an address (ADDRESS[/PREFIX]): the first empty GID");
  add->add_option("address", o->address, "10.0.0.2/24, fd00::2/64, ...")->required();
  CLI::App* del = cmd->add_subcommand("del", "Take an address from the port: its GID entry becomes empty");
  del->add_option("address", o->address, "the address")->required();
  add->callback([o, &exit_code] { exit_code = guarded([&] { return change(*o, "port_address_add", "added as"); }); });
  del->callback(
      [o, &exit_code] { exit_code = guarded([&] { return change(*o, "port_address_del", "removed from"); }); });
  show_cmd->callback([o, &exit_code] { exit_code = guarded([&] { return show(*o); }); });
  cmd->callback([cmd, o, &exit_code] {
    if (cmd->get_subcommands().empty()) exit_code = guarded([&] { return show(*o); });
  });
}

}  // namespace uroce::pcap_tools
