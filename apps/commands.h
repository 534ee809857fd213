#pragma once
// Subcommands of the `lockstep` tool; each registers its options on the CLI11 app and returns the
// function that runs it.
#include <CLI/CLI.hpp>
#include <functional>

namespace lockstep::apps {

std::function<int()> add_train_command(CLI::App& app);
std::function<int()> add_devices_command(CLI::App& app);
std::function<int()> add_evaluate_command(CLI::App& app);
std::function<int()> add_predict_command(CLI::App& app);

}  // namespace lockstep::apps
