// `uroce`: the command line for RoCEv2 captures.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "pcap_tools/address_command.hpp"
#include "pcap_tools/check_command.hpp"
#include "pcap_tools/dissect_command.hpp"
#include "pcap_tools/replay_command.hpp"
#include "pcap_tools/stats_command.hpp"

int main(int argc, char** argv) {
  // Diagnostics go to stderr through spdlog; stdout carries only the tool's output, so it can be piped.
  auto logger = spdlog::stderr_color_mt("uroce");
  logger->set_pattern("uroce: %^%l%$: %v");
  spdlog::set_default_logger(logger);

  CLI::App app{
      "uroce: dissect, explain, check and replay RoCEv2 traffic (pcap, pcapng or standard input); read uroced's counters"};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may also follow the subcommand
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });

  int exit_code = 0;
  uroce::pcap_tools::add_dissect_command(app, exit_code);
  uroce::pcap_tools::add_explain_command(app, exit_code);
  uroce::pcap_tools::add_check_command(app, exit_code);
  uroce::pcap_tools::add_replay_command(app, exit_code);
  uroce::pcap_tools::add_stats_command(app, exit_code);
  uroce::pcap_tools::add_address_command(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are not errors; a bad command line is exit status 2, as for diff, grep and
    // Python's argparse, so that a CI job tells it from 1 ("a rule broken", "a difference") instead of
    // getting CLI11's own numbers (105, 106, 109...).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}
