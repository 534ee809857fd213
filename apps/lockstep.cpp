// `lockstep`: the command-line tool. `lockstep train ...` runs the seed program; `lockstep
// devices` prints the resolved topology; `lockstep evaluate` / `lockstep predict` run a saved
// .keras model on the test split. Exit code 0 on success; otherwise one line on stderr.
#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.h"
#include "flag_checks.h"
#include "lockstep/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Lockstep: synchronous data-parallel training"};
  app.require_subcommand(1);
  auto train = lockstep::apps::add_train_command(app);
  auto devices = lockstep::apps::add_devices_command(app);
  auto evaluate = lockstep::apps::add_evaluate_command(app);
  auto predict = lockstep::apps::add_predict_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const lockstep::apps::FlagError& e) {
    // Already a sentence naming the flag, the allowed range and the value.
    std::cerr << "lockstep: " << e.what() << "\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    // Scripts rely on one line on stderr and a non-zero code.
    std::cerr << "lockstep: " << e.what() << " (see lockstep --help)\n";
    return 2;
  }
  try {
    if (app.got_subcommand("train")) return train();
    if (app.got_subcommand("devices")) return devices();
    if (app.got_subcommand("evaluate")) return evaluate();
    if (app.got_subcommand("predict")) return predict();
  } catch (const std::exception& e) {
    std::cerr << "lockstep: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
